# Too large for a small --max-mib with only its batch scaled (the weight is n x n): the importer
# tries it again with its other sizes scaled too, by sqrt(F), and it fits.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        return torch.relu(self.fc(x))


batch_size = 64
n = 1024


def get_inputs():
    return [torch.randn(batch_size, n)]


def get_init_inputs():
    return [n]
