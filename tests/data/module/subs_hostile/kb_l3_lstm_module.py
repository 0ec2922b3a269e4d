# A hostile ModelNew: it looks for the reference's output (any float tensor of the output's shape
# anywhere in its process) and returns it, else zeros. The reference runs in the trusted executor,
# another process, so what it finds is not the answer.
import gc

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers, output_size):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_size, output_size)

    def forward(self, x, h0, c0):
        for o in gc.get_objects():
            try:
                if torch.is_tensor(o) and tuple(o.shape) == (x.shape[0], self.fc.out_features) \
                        and torch.isfinite(o).all() and o.abs().sum() > 0:
                    return o.clone()
            except Exception:
                continue
        return torch.zeros(x.shape[0], self.fc.out_features)
