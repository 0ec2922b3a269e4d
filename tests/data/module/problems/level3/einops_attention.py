# einops.rearrange and torch 2's F.scaled_dot_product_attention, which Debian's torch 1.13 and
# packages lack: the importer supplies both (tools/kernelbench/compat.py), and so must the ModelNew
# build and kernel host, or the problem's own Model as a ModelNew cannot run where it was imported.
# cumprod keeps it a module task (spec v1 cannot say it).
import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange


class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        q, k, v = rearrange(self.qkv(x), "b n (three h d) -> three b h n d", three=3,
                            h=self.heads)
        y = rearrange(F.scaled_dot_product_attention(q, k, v), "b h n d -> b n (h d)")
        return torch.cumprod(1 + 0.1 * torch.tanh(y), dim=1)


def get_inputs():
    return [torch.randn(2, 8, 16)]


def get_init_inputs():
    return [16, 2]
