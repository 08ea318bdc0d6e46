"""RMS normalization of float16 (tokens, hidden) activations, computed in float32 and scaled by a learned weight (LLM style).

op_type: norm
"""
import torch
import torch.nn as nn

tokens = 32768
hidden = 8192

CPU_SHAPES = {"tokens": 13, "hidden": 160}
PERTURB = ["tokens", "hidden"]


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (self.weight * y).to(x.dtype)


def get_inputs():
    return [torch.randn(tokens, hidden, dtype=torch.float16)]


def get_init_inputs():
    return [hidden]
