# Tries, in the kernel host, to reach what the sandbox denies: a new process, a socket, a file
# outside its scratch folder. Any one that works returns a wrong answer (an "escape" marker),
# so a pass would mean the sandbox held nothing; the denials make the call fail. runtime_error.
import os
import socket
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        if not os.path.exists("build.py"):  # in the kernel host, not the compile stage
            escaped = []
            for attempt in (lambda: os.fork(),
                            lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM),
                            lambda: open("/etc/passwd").read(),
                            lambda: open("/tmp/kiln-escape", "w").write("x")):
                try:
                    r = attempt()
                    if r == 0:
                        os._exit(0)
                    escaped.append(attempt)
                except OSError:
                    pass
            if escaped:
                return torch.full((x.shape[0], self.fc.out_features), 12345.0)
            raise RuntimeError("every escape was denied")
        return torch.relu(self.fc(x))
