# Reads a file outside the sandbox's reach at import (in the compile stage) and raises its text,
# hoping the build's error quotes it back. landlock denies the read: compile_error, and the reason
# holds the denial, never the file.
import torch
import torch.nn as nn

raise RuntimeError(open("/etc/passwd").read())


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))
