"""LLaMA-style feed-forward block: x + W2(silu(W1 h) * W3 h) with h = RMSNorm(x) (learned
weight), bias-free projections, float32, (batch, seq, dim) input.

op_type: architecture/gated_mlp
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8
seq_len = 1024
dim = 1024
hidden_dim = 2816

CPU_SHAPES = {"batch_size": 2, "seq_len": 11, "dim": 40, "hidden_dim": 72}
PERTURB = ["batch_size", "seq_len", "dim", "hidden_dim"]


class Model(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, eps: float = 1e-6):
        super().__init__()
        self.norm_weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm_weight
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, hidden_dim]
