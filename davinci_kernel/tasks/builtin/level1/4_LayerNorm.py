"""Layer normalization over the hidden dimension of (tokens, hidden) float32 activations, with a learned scale and shift.

op_type: norm
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

tokens = 32768
hidden = 4096

CPU_SHAPES = {"tokens": 11, "hidden": 200}
PERTURB = ["tokens", "hidden"]


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


def get_inputs():
    return [torch.randn(tokens, hidden) * 2.0 + 0.5]


def get_init_inputs():
    return [hidden]
