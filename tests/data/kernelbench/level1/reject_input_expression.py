# Hand-written test problem: an input drawn by an expression Kiln cannot draw (the exp of a
# draw).
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.abs(x)


def get_inputs():
    return [torch.exp(torch.rand(4, 8))]


def get_init_inputs():
    return []
