# Computes the right answer but clamps its input in place on the way: the executor compares the
# inputs after every call. input_mutated.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.relu(self.fc(x))
        x.clamp_(min=0)
        return y
