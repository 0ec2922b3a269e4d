# Hand-written test problem: a parameter drawn as torch.randn(...) * 0.02 (a scaled normal).
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(8) * 0.02)

    def forward(self, x):
        return x + self.bias


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
