# Hand-written test problem: a parameter filled with 2.0 (Kiln's constant inits: ones, zeros).
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.full((8,), 2.0))

    def forward(self, x):
        return x * self.w


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
