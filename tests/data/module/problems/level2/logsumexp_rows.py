# A logsumexp over rows large enough for ATen to split across threads: its amax asks for the
# thread count inside the parallel region, which on an OpenMP worker's first time starts a
# thread pool. In the sandboxed kernel host (no new threads) that waited forever, so the problem's
# own Model as a ModelNew timed out; the host now runs that set-up before the sandbox.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = nn.Linear(n, n)

    def forward(self, x):
        return torch.logsumexp(self.fc(x), dim=1)


def get_inputs():
    return [torch.randn(64, 1024)]


def get_init_inputs():
    return [1024]
