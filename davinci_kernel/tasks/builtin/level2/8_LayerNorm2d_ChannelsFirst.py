"""Channels-first LayerNorm of an NCHW float32 tensor: normalize over C at every pixel
(mean and variance reduced over channels, broadcast back), then a per-channel affine.

op_type: fusion/reduce_broadcast
"""
import torch
import torch.nn as nn

batch_size = 64
channels = 128
height = 64
width = 64

CPU_SHAPES = {"batch_size": 2, "channels": 24, "height": 10, "width": 9}
PERTURB = ["batch_size", "channels", "height", "width"]


class Model(nn.Module):
    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
