"""Batched matrix product C[i] = A[i] @ B[i] of float32 tensors (A: batch x m x k, B: batch x k x n).

op_type: matmul
"""
import torch
import torch.nn as nn

batch_size = 32
m = 1024
k = 2048
n = 1024

CPU_SHAPES = {"batch_size": 3, "m": 37, "k": 80, "n": 45}
PERTURB = ["batch_size", "m", "k", "n"]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    a = torch.randn(batch_size, m, k)
    b = torch.randn(batch_size, k, n) * (k ** -0.5)
    return [a, b]


def get_init_inputs():
    return []
