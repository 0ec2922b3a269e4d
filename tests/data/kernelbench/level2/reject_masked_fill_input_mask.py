# Hand-written test problem: masked_fill with a mask computed from an input (not a constant 0 / 1
# buffer): Kiln has no comparison op, so it is refused with the reason.
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, m):
        return torch.softmax(x.masked_fill(m == 0, float("-inf")), dim=-1)


def get_inputs():
    return [torch.randn(4, 8), torch.randint(0, 2, (4, 8)).float()]


def get_init_inputs():
    return []
