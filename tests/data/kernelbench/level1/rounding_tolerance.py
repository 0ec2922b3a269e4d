# Hand-written test problem: float32 rounds (x * 3 + 1e4) - 1e4 to about 5e-4, past Kiln's default
# tolerance (1e-4): the importer measures float32 against float64 and writes tolerance 1e-3.
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return (x * 3.0 + 1e4) - 1e4


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return []
