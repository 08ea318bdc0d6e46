"""Row-wise softmax of a scaled matrix product: softmax((A @ B) * scale, dim=-1), float32.

op_type: fusion/gemm_softmax
"""
import torch
import torch.nn as nn

M = 8192
K = 2048
N = 2048
scale_factor = 0.02

CPU_SHAPES = {"M": 50, "K": 72, "N": 100}
PERTURB = ["M", "K", "N"]


class Model(nn.Module):
    def __init__(self, scale_factor: float):
        super().__init__()
        self.scale_factor = scale_factor

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.matmul(a, b) * self.scale_factor, dim=-1)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return [scale_factor]
