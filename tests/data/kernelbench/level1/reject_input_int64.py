# Hand-written test problem: an int64 input (torch.randint's default dtype).
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, k):
        return x * k


def get_inputs():
    return [torch.randn(4, 8), torch.randint(0, 3, (4, 8))]


def get_init_inputs():
    return []
