"""Matrix product C = A @ B of float32 matrices (A: M x K, B: K x N with entries of scale 1/sqrt(K)).

op_type: matmul
"""
import torch
import torch.nn as nn

M = 4096
K = 4096
N = 4096

CPU_SHAPES = {"M": 61, "K": 100, "N": 72}
PERTURB = ["M", "K", "N"]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    a = torch.randn(M, K)
    b = torch.randn(K, N) * (K ** -0.5)
    return [a, b]


def get_init_inputs():
    return []
