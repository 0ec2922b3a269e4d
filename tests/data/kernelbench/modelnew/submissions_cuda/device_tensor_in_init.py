# Honest, but makes a cuda tensor in __init__: the compile stage has no device, so ModelNew is
# built (and its state_dict checked) by the kernel host at load. Must pass.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.zero = torch.zeros(1, device="cuda")

    def forward(self, x):
        return torch.maximum(self.fc(x), self.zero)
