# Hand-written test problem: torch.cumprod is not in spec v1 (missing op).
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.cumprod(torch.sigmoid(x), dim=1)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
