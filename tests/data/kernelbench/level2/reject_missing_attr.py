# Hand-written test problem: supported ops with argument values spec v1 cannot say:
# avg_pool's ceil_mode that changes the output size, dropout p > 0 (random in training mode),
# add's alpha, reflect padding.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(2, ceil_mode=True)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        y = self.drop(self.pool(x))
        return torch.add(y, F.pad(y, (0, 0, 0, 0), mode="reflect"), alpha=2)


def get_inputs():
    return [torch.randn(2, 3, 7, 7)]


def get_init_inputs():
    return []
