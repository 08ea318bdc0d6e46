"""x + silu(GroupNorm(x)) on an NCHW float32 feature map (a diffusion-UNet style
normalization, activation and skip connection).

op_type: fusion/norm_activation
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
channels = 256
num_groups = 32
height = 64
width = 64

CPU_SHAPES = {"batch_size": 2, "channels": 12, "num_groups": 4, "height": 9, "width": 13}
PERTURB = ["batch_size", "height", "width"]


class Model(nn.Module):
    def __init__(self, channels: int, num_groups: int):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(channels))
            self.norm.bias.copy_(0.1 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.norm(x))


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, num_groups]
