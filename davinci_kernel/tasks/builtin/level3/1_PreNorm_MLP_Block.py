"""Transformer MLP block with pre-normalization and a residual connection:
x + fc2(gelu(fc1(LayerNorm(x)))), float32, (batch, seq, dim) input.

op_type: architecture/mlp_block
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8
seq_len = 1024
dim = 1024
hidden_dim = 4096

CPU_SHAPES = {"batch_size": 2, "seq_len": 13, "dim": 48, "hidden_dim": 112}
PERTURB = ["batch_size", "seq_len", "dim", "hidden_dim"]


class Model(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, dim)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(dim))
            self.norm.bias.copy_(0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, hidden_dim]
