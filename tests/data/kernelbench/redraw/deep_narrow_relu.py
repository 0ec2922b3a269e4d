# Hand-written test problem: a deep, narrow ReLU MLP. At torch.nn's default init each layer
# shrinks the signal about sixfold, so after twelve the output is the biases' alone (degenerate);
# with He's init the input reaches the output.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        layers = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        self.net = nn.Sequential(*layers, nn.Linear(width, 4))

    def forward(self, x):
        return self.net(x)


batch_size = 8
width = 32


def get_inputs():
    return [torch.rand(batch_size, width)]


def get_init_inputs():
    return [width, 12]
