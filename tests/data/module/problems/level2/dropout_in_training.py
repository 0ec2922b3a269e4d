# Dropout in training mode (KernelBench's default): the output is random, so no reference can check
# a kernel against it; the importer refuses it with that reason.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.drop = nn.Dropout(0.5)
        self.rnn = nn.GRU(n, n, 1, batch_first=True)  # not spec v1: the module form is tried

    def forward(self, x):
        y, _ = self.rnn(self.drop(self.fc(x)))
        return y


def get_inputs():
    return [torch.randn(4, 5, 16)]


def get_init_inputs():
    return [16]
