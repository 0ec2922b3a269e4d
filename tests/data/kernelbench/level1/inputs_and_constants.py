# Hand-written test problem (KernelBench format): input draws (rand, randn, randint as float)
# and a non-tensor get_inputs() item (a dim) baked in as a constant.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b, c, dim):
        return torch.sum(a * b + c, dim=dim)


batch_size = 64
features = 8
input_shape = (batch_size, features)


def get_inputs():
    a = torch.rand(*input_shape)
    b = torch.randn(batch_size, features)
    c = torch.randint(0, 5, (batch_size, features), dtype=torch.float32)
    return [a, b, c, 1]


def get_init_inputs():
    return []
