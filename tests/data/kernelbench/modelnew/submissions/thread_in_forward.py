# Starts a thread on its first real call (after the compile-time check): seccomp refuses new
# threads in a kernel host, so the call fails. runtime_error.
import threading
import torch
import torch.nn as nn

calls = []


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        calls.append(1)
        if len(calls) > 1 or not __import__("os").path.exists("build.py"):
            t = threading.Thread(target=lambda: None)
            t.start()
            t.join()
        return torch.relu(self.fc(x))
