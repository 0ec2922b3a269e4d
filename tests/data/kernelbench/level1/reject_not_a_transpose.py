# Hand-written test problem: A + A.data looks like A + A.T to a recorder that goes by names (both
# are properties), but is 2A: refused, not symmetrized.
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A):
        return torch.relu(A - 0.5)


def get_inputs():
    A = torch.rand(8, 8)
    return [(A + A.data) / 2]


def get_init_inputs():
    return []
