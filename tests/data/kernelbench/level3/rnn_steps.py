# Hand-written test problem: a vanilla RNN unrolled over 70 steps (about 420 ops, past the old
# 256-op limit) whose outputs are stacked: torch.stack of 70 tensors, more than one Kiln cat takes.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.i2h = nn.Linear(input_size + hidden_size, hidden_size)

    def forward(self, x, h0):
        h, outs = h0, []
        for t in range(x.shape[0]):
            h = torch.tanh(self.i2h(torch.cat((x[t], h), dim=1)))
            outs.append(h)
        return torch.stack(outs, dim=0)


batch_size = 4
input_size = 6
hidden_size = 8
steps = 70


def get_inputs():
    return [torch.randn(steps, batch_size, input_size), torch.randn(batch_size, hidden_size)]


def get_init_inputs():
    return [input_size, hidden_size]
