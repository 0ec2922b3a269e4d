# Hand-written test problem: a weight re-initialized with xavier_normal_ (no Kiln init).
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        nn.init.xavier_normal_(self.fc.weight)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
