# A branch on a value (and an op spec v1 cannot say): torch.jit.trace records the branch the
# example takes, so the traced module is right on the example only. The importer refuses it.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.gru = nn.GRU(n, n, 1, batch_first=True)

    def forward(self, x):
        y, _ = self.gru(x)
        if x[0, 0, 0] > 0:
            return y * 2
        return -y


def get_inputs():
    return [torch.randn(4, 5, 16)]


def get_init_inputs():
    return [16]
