# The same in the kernel host, where a failed call's exception is reported: the read is denied
# there too, so runtime_error with the denial, never the file.
import os
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        if not os.path.exists("build.py"):  # in the kernel host, not the compile stage
            raise RuntimeError(open("/etc/passwd").read())
        return torch.relu(self.fc(x))
