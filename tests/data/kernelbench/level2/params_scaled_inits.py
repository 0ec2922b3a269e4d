# Hand-written test problem: params whose inits are affine draws (xavier_normal_, kaiming_normal_
# with fan_out, randn * 0.02, uniform_(-2, 3)): normal / uniform with scale and shift in Kiln.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 32)
        nn.init.xavier_normal_(self.fc.weight)
        self.conv = nn.Conv2d(4, 8, 3)
        nn.init.kaiming_normal_(self.conv.weight, mode="fan_out", nonlinearity="relu")
        self.offset = nn.Parameter(torch.randn(32) * 0.02)
        self.gain = nn.Parameter(torch.empty(8, 1, 1))
        nn.init.uniform_(self.gain, -2.0, 3.0)

    def forward(self, x, img):
        return self.fc(x) + self.offset, self.conv(img) * self.gain


def get_inputs():
    return [torch.randn(16, 64), torch.rand(2, 4, 10, 10)]


def get_init_inputs():
    return []
