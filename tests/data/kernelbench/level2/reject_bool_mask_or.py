# Hand-written test problem: a bool mask used where bool and float differ (True + True is True),
# so Kiln's float 0 / 1 mask would compute something else: the numerical check must reject it.
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, mask):
        return x * (mask + mask)


def get_inputs():
    x = torch.randn(8, 16)
    return [x, torch.randint(0, 2, x.shape).bool()]


def get_init_inputs():
    return []
