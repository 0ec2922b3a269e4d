# Hand-written test problem: constant padding (F.pad with a fill value, nn.ZeroPad2d) and max
# pools whose ceil_mode=True adds a partial last window (2d, and 1d with padding).
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.zpad = nn.ZeroPad2d((1, 2, 0, 1))
        self.pool1 = nn.MaxPool1d(3, stride=2, padding=1, ceil_mode=True)

    def forward(self, x):
        y = self.pool(F.pad(x, [1, 1, 2, 0], value=-0.5))  # (B, 3, 10, 10) -> (B, 3, 5, 5)
        z = self.zpad(y)                                    # (B, 3, 6, 8)
        w = self.pool1(z.flatten(2))                        # (B, 3, 48) -> (B, 3, 25)
        return F.pad(w, (0, 3)) * 2.0


batch_size = 4


def get_inputs():
    return [torch.randn(batch_size, 3, 8, 8)]


def get_init_inputs():
    return []
