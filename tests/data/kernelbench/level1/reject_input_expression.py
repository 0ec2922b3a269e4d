# Hand-written test problem: an input drawn by an expression (uniform on [-1, 1)).
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.abs(x)


def get_inputs():
    return [torch.rand(4, 8) * 2 - 1]


def get_init_inputs():
    return []
