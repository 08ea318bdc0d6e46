"""Inclusive prefix sum along dimension 1 of a (batch, length) float32 matrix.

op_type: scan
"""
import torch
import torch.nn as nn

batch_size = 16384
length = 8192

CPU_SHAPES = {"batch_size": 3, "length": 2500}
PERTURB = ["batch_size", "length"]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return []
