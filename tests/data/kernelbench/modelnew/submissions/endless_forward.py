# Never returns from a real call (asleep, so the core stays free): killed at the job's deadline.
# timeout.
import os
import time
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        while not os.path.exists("build.py"):
            time.sleep(0.05)
        return torch.relu(self.fc(x))
