# Its Linear under another attribute name: the task's params have nowhere to go. A compile-stage
# error naming the missing and unexpected state_dict keys.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))
