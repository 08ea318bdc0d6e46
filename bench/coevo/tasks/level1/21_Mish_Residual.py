"""Elementwise chain: mish(x) * scale + x, float32 (mish(x) = x * tanh(softplus(x))).

Practice task of the co-evolution v2 (technique fuse_elementwise_chain; SFT only): eager
runs three kernels (mish, mul, add).

op_type: fusion/elementwise
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4096
dim = 8192
scale_factor = 0.5

CPU_SHAPES = {"batch_size": 4, "dim": 96}
PERTURB = ["batch_size", "dim"]


class Model(nn.Module):
    def __init__(self, scale_factor: float):
        super().__init__()
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.mish(x) * self.scale_factor + x


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [scale_factor]
