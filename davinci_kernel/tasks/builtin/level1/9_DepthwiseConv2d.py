"""Depthwise 3x3 convolution (stride 1, zero padding 1, with bias) of a float32 NCHW image batch.

op_type: conv
"""
import torch
import torch.nn as nn

batch_size = 16
channels = 128
height = 256
width = 256
kernel_size = 3

CPU_SHAPES = {"batch_size": 2, "channels": 3, "height": 19, "width": 23}
PERTURB = ["batch_size", "channels", "height", "width"]


class Model(nn.Module):
    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size, stride=1,
                              padding=kernel_size // 2, groups=channels, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, kernel_size]
