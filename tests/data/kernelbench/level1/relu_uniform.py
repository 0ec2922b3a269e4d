# Hand-written test problem: relu of uniform [0, 1) inputs is the identity (degenerate).
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size = 16


def get_inputs():
    return [torch.rand(batch_size, 32)]


def get_init_inputs():
    return []
