# Hand-written test problem: (x * 3 + 1e6) - 1e6 in float32 is off by up to 0.03, more than
# any tolerance a numerical check can keep (KernelBench's 1e-2): refused as ill-conditioned.
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return (x * 3.0 + 1e6) - 1e6


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return []
