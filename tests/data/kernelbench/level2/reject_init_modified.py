# Hand-written test problem: a default-initialized bias changed in place afterwards.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
        with torch.no_grad():
            self.fc.bias.add_(1.0)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
