"""SwiGLU projection: silu(x @ Wg^T) * (x @ Wu^T), two bias-free linear layers sharing
the same input, float32.

op_type: fusion/dual_gemm
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

num_tokens = 4096
in_features = 2048
hidden_features = 4096

CPU_SHAPES = {"num_tokens": 40, "in_features": 72, "hidden_features": 96}
PERTURB = ["num_tokens", "in_features", "hidden_features"]


class Model(nn.Module):
    def __init__(self, in_features: int, hidden_features: int):
        super().__init__()
        self.gate_proj = nn.Linear(in_features, hidden_features, bias=False)
        self.up_proj = nn.Linear(in_features, hidden_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.gate_proj(x)) * self.up_proj(x)


def get_inputs():
    return [torch.randn(num_tokens, in_features)]


def get_init_inputs():
    return [in_features, hidden_features]
