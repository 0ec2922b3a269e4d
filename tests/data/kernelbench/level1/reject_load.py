# Hand-written test problem: imports a module this machine does not have.
import torch
import torch.nn as nn
import kiln_no_such_module  # noqa: F401


class Model(nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
