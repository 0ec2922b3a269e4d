# Hand-written test problem: concatenation and constant slicing in every spelling the importer
# maps (x[a:b:c], x[..., -k:], x[:, i], narrow, split, chunk, stack, torch.cat).
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        strided = x[:, 2:10:2]                   # [B, 4, 12]
        tail = x[..., -3:]                       # [B, 16, 3]
        middle = torch.narrow(x, 2, 1, 4)        # [B, 16, 4]
        first = x[:, 0]                          # [B, 12]
        head, rest = x.split([5, 11], dim=1)     # [B, 5, 12], [B, 11, 12]
        left, right = x.chunk(2, dim=2)          # [B, 16, 6] each
        pair = torch.stack([first, first * 2.0], dim=1)           # [B, 2, 12]
        rows = torch.cat([strided, head, pair], dim=1)            # [B, 11, 12]
        cols = torch.cat((tail, middle, left - right), dim=-1)    # [B, 16, 13]
        return torch.cat([rows.flatten(1), cols.flatten(1), torch.relu(rest).flatten(1)], dim=1)


batch_size = 8


def get_inputs():
    return [torch.randn(batch_size, 16, 12)]


def get_init_inputs():
    return []
