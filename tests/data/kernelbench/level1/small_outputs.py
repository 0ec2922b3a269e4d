# Hand-written test problem: every output is far below the default atol (1e-4), so zeros pass the
# default check; float32 computes it almost exactly, so the importer tightens atol until zeros fail.
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 1e-5


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return []
