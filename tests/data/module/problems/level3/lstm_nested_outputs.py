# nn.LSTM's whole output, (out, (h_n, c_n)): three tensors once flattened, each a task output
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, 1, batch_first=True)

    def forward(self, x):
        return self.lstm(x)


batch_size, seq, input_size, hidden_size = 4, 6, 8, 12


def get_inputs():
    return [torch.randn(batch_size, seq, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
