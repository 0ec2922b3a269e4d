# Hand-written test problem: MaxPool2d(ceil_mode=True) where the windows are those of
# ceil_mode=False (7 = (3 - 1) * 2 + 3), so it imports exactly; and torch.max / bmm.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(3, stride=2, ceil_mode=True)

    def forward(self, x, y):
        p = self.pool(x).flatten(2)
        return torch.bmm(p, y).max()


batch_size = 2


def get_inputs():
    return [torch.randn(batch_size, 3, 7, 7), torch.randn(batch_size, 9, 4)]


def get_init_inputs():
    return []
