"""Elementwise chain: leaky_relu(x, slope) * scale + bias with a learned per-feature bias, float32.

Practice task of the co-evolution v2 (technique fuse_elementwise_chain; SFT only): eager
runs three kernels (leaky_relu, mul, add).

op_type: fusion/elementwise
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
dim = 4096
negative_slope = 0.1
scale_factor = 3.0

CPU_SHAPES = {"batch_size": 4, "dim": 90}
PERTURB = ["batch_size", "dim"]


class Model(nn.Module):
    def __init__(self, dim: int, negative_slope: float, scale_factor: float):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.negative_slope = negative_slope
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, self.negative_slope) * self.scale_factor + self.bias


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, negative_slope, scale_factor]
