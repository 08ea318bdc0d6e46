"""Row reduction then an epilogue: softplus(rmsnorm(x) * weight) * scale, float32.

Practice task of the co-evolution v2 (technique one_pass_row_reduction; SFT only): eager
runs one kernel per op.

op_type: fusion/normalization
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

num_tokens = 16384
hidden_size = 4096
scale = 0.5

CPU_SHAPES = {"num_tokens": 6, "hidden_size": 40}
PERTURB = ["num_tokens", "hidden_size"]


class Model(nn.Module):
    def __init__(self, hidden_size: int, scale: float, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size))
        self.scale = scale
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(dim=-1, keepdim=True)
        y = x * torch.rsqrt(var + self.eps) * self.weight
        return F.softplus(y) * self.scale


def get_inputs():
    return [torch.randn(num_tokens, hidden_size)]


def get_init_inputs():
    return [hidden_size, scale]
