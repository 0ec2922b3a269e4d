# Hand-written test problem: an argmax result used by another op (Kiln's index tensors may
# only be outputs).
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.argmax(x, dim=1) * 2


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
