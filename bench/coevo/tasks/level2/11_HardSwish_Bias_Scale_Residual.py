"""Elementwise chain: hardswish(x + bias) * scale + x with a learned per-feature bias, float32.

Held-out sibling of level2/5_Swish_Scale_Clamp_Residual (co-evolution v2, technique
fuse_elementwise_chain): eager runs four kernels (add, hardswish, mul, add) over a 256 MiB
tensor, nine 4-byte accesses per element; one fused pass needs two.

op_type: fusion/elementwise
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
dim = 8192
scale_factor = 1.5

CPU_SHAPES = {"batch_size": 5, "dim": 72}
PERTURB = ["batch_size", "dim"]


class Model(nn.Module):
    def __init__(self, dim: int, scale_factor: float):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.hardswish(x + self.bias)
        return y * self.scale_factor + x


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, scale_factor]
