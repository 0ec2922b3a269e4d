# Hand-written test problem: 99.5% of the outputs are 0 (an all-zeros kernel passes those),
# yet not all of them, so only the > 99% rule flags it.
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x - 0.995) * 100.0


def get_inputs():  # no batch_size: --scale-batch leaves it at 8192 elements
    return [torch.rand(64, 128)]


def get_init_inputs():
    return []
