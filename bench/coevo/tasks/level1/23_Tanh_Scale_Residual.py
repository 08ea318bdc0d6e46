"""Elementwise chain: tanh(x) * scale + x, float32.

Practice task of the co-evolution v2 (technique fuse_elementwise_chain; SFT only): eager
runs three kernels (tanh, mul, add).

op_type: fusion/elementwise
"""
import torch
import torch.nn as nn

batch_size = 8192
dim = 4096
scale_factor = 2.25

CPU_SHAPES = {"batch_size": 6, "dim": 70}
PERTURB = ["batch_size", "dim"]


class Model(nn.Module):
    def __init__(self, scale_factor: float):
        super().__init__()
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * self.scale_factor + x


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [scale_factor]
