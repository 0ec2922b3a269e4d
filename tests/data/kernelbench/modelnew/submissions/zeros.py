# Writes zeros of the right shape: wrong (ReLU of a Linear is not all zeros).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.zeros(x.shape[0], self.fc.out_features)
