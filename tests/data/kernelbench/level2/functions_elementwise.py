# Hand-written test problem (KernelBench format): functional calls, operators with scalars on
# either side, extra parameters and their inits, constants made in forward, an in-place op.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))
        self.gain = nn.Parameter(torch.ones(n))
        self.scale = nn.Parameter(torch.tensor(0.5))
        self.slope = 0.1

    def forward(self, x, y):
        a = F.leaky_relu(x, self.slope) + self.bias
        b = torch.clamp(2 * a, min=-1.0, max=1.5)
        c = (1 - b) * self.gain
        d = 1 / (torch.sigmoid(c) + 1.0) + c ** 2
        e = torch.min(d, torch.tensor(0.75)) * self.scale
        f = torch.maximum(e, y) - y / 3
        f.relu_()
        return torch.tanh(f) * torch.sigmoid(f) + F.gelu(f)


batch_size = 8
n = 16


def get_inputs():
    return [torch.randn(batch_size, n), torch.rand(batch_size, n)]


def get_init_inputs():
    return [n]
