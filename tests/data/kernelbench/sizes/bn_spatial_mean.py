# BatchNorm in training mode, then a mean over the spatial dims (KernelBench's L2 77): on a batch
# of 1 each sample is normalized by its own statistics and the mean is zero, so zeros pass; on a
# batch of 2 or more it says how each sample differs from the batch. Scaled to batch 1, the
# importer checks it at batch 2.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)

    def forward(self, x):
        return self.bn(self.conv(x)).mean(dim=(2, 3))


batch_size = 64


def get_inputs():
    return [torch.rand(batch_size, 3, 16, 16)]


def get_init_inputs():
    return []
