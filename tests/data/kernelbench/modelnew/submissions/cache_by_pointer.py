# A result cache keyed on the input tensor's address: the executor refills the same buffers with
# fresh content for every call, so the cached answer is stale. Wrong.
import torch
import torch.nn as nn

cache = {}


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        key = x.data_ptr()
        if key not in cache:
            cache[key] = torch.relu(self.fc(x))
        return cache[key]
