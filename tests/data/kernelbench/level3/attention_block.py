# Hand-written test problem: nn.MultiheadAttention as self-attention over image positions
# (KernelBench level 3's VisionAttention, small) and as batch-first cross-attention.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed_dim, num_heads)
        self.cross = nn.MultiheadAttention(embed_dim, num_heads // 2, batch_first=True)
        self.norm = nn.LayerNorm(embed_dim)

    def forward(self, x, memory):
        B, C, H, W = x.shape
        s = x.view(B, C, H * W).permute(2, 0, 1)  # (seq, batch, embed)
        a, _ = self.attn(s, s, s)
        s = self.norm(a + s)
        t = s.permute(1, 0, 2)  # (batch, seq, embed)
        c, _ = self.cross(t, memory, memory)
        return (c + t).permute(0, 2, 1).reshape(B, C, H, W)


embed_dim = 16
num_heads = 4
batch_size = 4


def get_inputs():
    return [torch.rand(batch_size, embed_dim, 4, 3), torch.randn(batch_size, 5, embed_dim)]


def get_init_inputs():
    return [embed_dim, num_heads]
