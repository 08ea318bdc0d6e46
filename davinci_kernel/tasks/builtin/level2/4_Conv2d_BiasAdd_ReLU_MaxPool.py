"""3x3 convolution (padding 1), extra per-channel bias add, ReLU, then 2x2 max pooling,
NCHW float32.

op_type: fusion/conv_epilogue_pool
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
in_channels = 16
out_channels = 64
height = 128
width = 128
kernel_size = 3

CPU_SHAPES = {"batch_size": 2, "in_channels": 34, "out_channels": 10, "height": 9, "width": 7}
PERTURB = ["batch_size", "in_channels", "out_channels", "height", "width"]


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = torch.relu(x + self.bias)
        return F.max_pool2d(x, kernel_size=2)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
