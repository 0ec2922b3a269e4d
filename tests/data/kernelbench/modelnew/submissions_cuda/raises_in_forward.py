# A forward that raises: a failed call, not a crash of anything trusted. runtime_error.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        raise RuntimeError("deliberate")
