# A forward that replaces the Model's own state but never reads what an earlier call left there
# (KernelBench's VanillaRNN copies its initial_hidden input in first): a task, since calls on
# inputs A, B, A give A's output twice.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n, batch):
        super().__init__()
        self.i2h = nn.Linear(2 * n, n)
        self.h2o = nn.Linear(n, 8)
        self.hidden = torch.randn(batch, n)

    def forward(self, x, initial_hidden):
        self.hidden.copy_(initial_hidden)
        self.hidden = torch.tanh(self.i2h(torch.cat((x, self.hidden), dim=1)))
        return self.h2o(self.hidden)


def get_inputs():
    return [torch.randn(4, 16), torch.randn(4, 16)]


def get_init_inputs():
    return [16, 4]
