# Hand-written test problem: an einsum that is one matmul, a bool mask input drawn as
# randint(0, 2).bool(), zeros_like, flip and a slice, then a cumulative sum.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(12, 6))

    def forward(self, x, mask):
        y = torch.einsum("bij,jk->bik", x * mask, self.w)        # [B, 16, 6]
        z = torch.cat([torch.zeros_like(y[:, :1]), y.flip(1)], dim=1)
        return torch.cumsum(z, dim=1)                            # [B, 17, 6]


batch_size = 8


def get_inputs():
    x = torch.randn(batch_size, 16, 12)
    mask = torch.randint(0, 2, x.shape).bool()
    return [x, mask]


def get_init_inputs():
    return []
