# A GRU then a BatchNorm in training mode (KernelBench's default): the forward updates the running
# statistics in place, so they stay in the module (buffers, as the Model makes them) and only the
# parameters are the task's; the reference never writes into what the task gives it.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.gru = nn.GRU(n, n, 1, batch_first=True)
        self.bn = nn.BatchNorm1d(n)

    def forward(self, x):
        y, _ = self.gru(x)
        return self.bn(y[:, -1, :])


def get_inputs():
    return [torch.randn(8, 5, 16)]


def get_init_inputs():
    return [16]
