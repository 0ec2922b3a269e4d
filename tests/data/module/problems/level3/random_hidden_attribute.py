# The initial state is a random plain attribute (outside the state_dict): the task draws it and gives
# it to a submission by its attribute path ([kernelbench] attributes), as it gives params by key.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n, batch):
        super().__init__()
        self.gru = nn.GRU(n, n, 1, batch_first=True)
        self.h0 = torch.randn(1, batch, n)

    def forward(self, x):
        y, _ = self.gru(x, self.h0)
        return y


def get_inputs():
    return [torch.randn(4, 5, 16)]


def get_init_inputs():
    return [16, 4]
