"""RMSNorm of x (learned per-feature weight) gated by SiLU of a second input:
rmsnorm(x) * weight * silu(gate), over the last dimension, float32.

op_type: fusion/norm_gating
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

num_tokens = 16384
hidden_size = 4096

CPU_SHAPES = {"num_tokens": 9, "hidden_size": 200}
PERTURB = ["num_tokens", "hidden_size"]


class Model(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(dim=-1, keepdim=True)
        y = x * torch.rsqrt(var + self.eps) * self.weight
        return y * F.silu(gate)


def get_inputs():
    return [torch.randn(num_tokens, hidden_size), torch.randn(num_tokens, hidden_size)]


def get_init_inputs():
    return [hidden_size]
