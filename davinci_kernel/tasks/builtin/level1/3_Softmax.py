"""Softmax over the last dimension of a (batch, dim) float32 matrix with long rows.

op_type: softmax
"""
import torch
import torch.nn as nn

batch_size = 8192
dim = 16384

CPU_SHAPES = {"batch_size": 9, "dim": 300}
PERTURB = ["batch_size", "dim"]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim) * 3.0]


def get_init_inputs():
    return []
