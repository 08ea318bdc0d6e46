"""Elementwise chain: clamp(x * sigmoid(x) * scale, lo, hi) + x, float32.

op_type: fusion/elementwise
"""
import torch
import torch.nn as nn

batch_size = 8192
dim = 8192
scale_factor = 2.0
clamp_min = -0.25
clamp_max = 1.5

CPU_SHAPES = {"batch_size": 7, "dim": 300}
PERTURB = ["batch_size", "dim"]


class Model(nn.Module):
    def __init__(self, scale_factor: float, clamp_min: float, clamp_max: float):
        super().__init__()
        self.scale_factor = scale_factor
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * torch.sigmoid(x)
        y = y * self.scale_factor
        y = torch.clamp(y, self.clamp_min, self.clamp_max)
        return y + x


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [scale_factor, clamp_min, clamp_max]
