# Hand-written test problem: two inputs made from one draw (A and its symmetrization). Kiln draws
# each input on its own, which would be another problem: refused.
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, S):
        return torch.matmul(A, S)


def get_inputs():
    A = torch.rand(8, 8)
    return [A, (A + A.T) / 2]


def get_init_inputs():
    return []
