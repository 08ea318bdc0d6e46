"""Elementwise chain: hardsigmoid(x) * scale + bias, float32, with a learned per-feature bias.

Practice task of the co-evolution v2 (technique fuse_elementwise_chain; SFT only): eager
runs one kernel per op.

op_type: fusion/elementwise
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
dim = 4096
scale_factor = 1.75

CPU_SHAPES = {"batch_size": 5, "dim": 75}
PERTURB = ["batch_size", "dim"]


class Model(nn.Module):
    def __init__(self, dim: int, scale_factor: float):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardsigmoid(x) * self.scale_factor + self.bias


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, scale_factor]
