# A torch.randn bias against a clamp: under the seed of this task's name (kb_l2_clamped_bias)
# Kiln draws 1.45, x - 1.45 < -0.4 for every x in [0, 0.5) and every output is the clamp's bound;
# from seed 1 (0.66) most outputs are not. The inputs carry a scale, so no input redraw applies.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(1))

    def forward(self, x):
        return torch.clamp(x - self.bias, -0.4, 0.4)


def get_inputs():
    return [torch.rand(16, 64) * 0.5]


def get_init_inputs():
    return []
