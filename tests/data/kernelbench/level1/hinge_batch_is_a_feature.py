# Hand-written test problem: KernelBench's hinge loss, where batch_size also sizes the last dim
# (targets broadcast against it): scaled, its shapes disagree, so it is imported at its own sizes.
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


batch_size = 64
input_shape = (64,)


def get_inputs():
    return [torch.rand(batch_size, *input_shape),
            torch.randint(0, 2, (batch_size,)).float() * 2 - 1]


def get_init_inputs():
    return []
