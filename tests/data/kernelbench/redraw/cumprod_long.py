# A running product of 4096 torch.rand values underflows to zero within ~100 factors, so zeros
# pass; the importer draws the inputs near 1 instead (redraw.py, unit_product_inputs).
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.cumprod(x, dim=1)


def get_inputs():
    return [torch.rand(8, 4096)]


def get_init_inputs():
    return []
