# ModelNew = the problem's Model: what the reference computes, in PyTorch
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers, output_size):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_size, output_size)

    def forward(self, x, h0, c0):
        out, _ = self.lstm(x, (h0, c0))
        return self.fc(out[:, 0, :])  # the first step, not the last


batch_size, seq, input_size, hidden_size, num_layers, output_size = 8, 12, 32, 48, 2, 16


def get_inputs():
    return [torch.randn(batch_size, seq, input_size),
            torch.randn(num_layers, batch_size, hidden_size),
            torch.randn(num_layers, batch_size, hidden_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_layers, output_size]
