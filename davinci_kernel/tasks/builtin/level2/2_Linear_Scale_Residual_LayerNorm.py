"""LayerNorm(scale * (x @ W^T + b) + residual): a projection with a scaled residual branch
and post-normalization, float32.

op_type: fusion/gemm_residual_layernorm
"""
import torch
import torch.nn as nn

batch_size = 8192
in_features = 2048
out_features = 2048
scale_factor = 0.5

CPU_SHAPES = {"batch_size": 37, "in_features": 72, "out_features": 120}
PERTURB = ["batch_size", "in_features", "out_features"]


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale_factor: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features, eps=1e-5)
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        y = self.linear(x) * self.scale_factor + residual
        return self.norm(y)


def get_inputs():
    return [torch.randn(batch_size, in_features), torch.randn(batch_size, out_features)]


def get_init_inputs():
    return [in_features, out_features, scale_factor]
