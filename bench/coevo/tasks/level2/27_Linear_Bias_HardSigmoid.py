"""Linear layer with bias, then an activation: hardsigmoid(x @ W^T + b), float32.

Practice task of the co-evolution v2 (technique gemm_tile128_fused_epilogue; SFT only):
eager runs a GEMM with bias, then the activation.

op_type: fusion/gemm_epilogue
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4096
in_features = 4096
out_features = 4096

CPU_SHAPES = {"batch_size": 17, "in_features": 30, "out_features": 36}
PERTURB = ["batch_size", "in_features", "out_features"]


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardsigmoid(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
