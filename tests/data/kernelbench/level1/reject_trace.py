# Hand-written test problem: data-dependent control flow, which torch.fx cannot trace.
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return torch.relu(x)
        return torch.sigmoid(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
