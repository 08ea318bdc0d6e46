"""RMSNorm of x (learned per-feature weight), then sigmoid, then a constant scale:
sigmoid(rmsnorm(x) * weight) * scale over the last dimension, float32.

Held-out sibling of level2/6_RMSNorm_SiLU_Gate (co-evolution v2, technique
one_pass_row_reduction): eager runs six kernels (pow, mean, mul by rstd, mul by weight,
sigmoid, mul by scale) over a 256 MiB tensor, eleven 4-byte accesses per element; one pass
with the row in registers needs two.

op_type: fusion/norm_activation
"""
import torch
import torch.nn as nn

num_tokens = 32768
hidden_size = 2048
scale = 2.0

CPU_SHAPES = {"num_tokens": 6, "hidden_size": 72}
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
        return torch.sigmoid(y) * self.scale


def get_inputs():
    return [torch.randn(num_tokens, hidden_size)]


def get_init_inputs():
    return [hidden_size, scale]
