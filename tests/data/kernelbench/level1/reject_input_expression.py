# Hand-written test problem: an input drawn by an expression Kiln cannot draw (the softmax of a
# draw, as KernelBench's KL-divergence problem makes its distributions).
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.abs(x)


def get_inputs():
    return [torch.softmax(torch.rand(4, 8), dim=-1)]


def get_init_inputs():
    return []
