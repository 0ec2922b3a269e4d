# Hand-written test problem: inputs made the way KernelBench makes them, each a draw Kiln has:
# (A + A.T) / 2, triu / tril of rand, rand(...) * rand(()), randint(0, 2) * 2 - 1, 1 - rand, and
# distributions by a softmax over the last dim (KL divergence's inputs).
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, U, L, p, t, q, s, r):
        return torch.matmul(A, U) + torch.matmul(L, A) + (p * t).sum() - q + s * r.log()


def get_inputs():
    A = torch.rand(8, 8)
    A = (A + A.T) / 2
    U = torch.triu(torch.rand(8, 8))
    L = torch.tril(torch.rand(8, 8))
    p = torch.rand(8, 8) * torch.rand(())
    t = torch.randint(0, 2, (8, 8)).float() * 2 - 1
    q = 1 - torch.rand(8, 8)
    s = (torch.rand(8, 8) * torch.rand(())).softmax(dim=-1)
    r = torch.softmax(torch.rand(8, 8), -1)
    return [A, U, L, p, t, q, s, r]


def get_init_inputs():
    return []
