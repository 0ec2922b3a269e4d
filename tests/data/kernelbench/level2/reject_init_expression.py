# Hand-written test problem: a parameter made by an expression that is not an affine draw
# (|randn|, a half-normal): no Kiln init.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(8).abs())

    def forward(self, x):
        return x + self.bias


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
