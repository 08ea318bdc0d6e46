"""Attention core for short sequences: softmax(Q @ K^T / sqrt(d)) @ V over
(batch, heads, seq, head_dim) float32 tensors, no mask.

op_type: fusion/attention
"""
import torch
import torch.nn as nn

batch_size = 32
num_heads = 16
seq_len = 512
head_dim = 64

CPU_SHAPES = {"batch_size": 2, "num_heads": 2, "seq_len": 40, "head_dim": 16}
PERTURB = ["batch_size", "seq_len"]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
        attn = torch.softmax(scores, dim=-1)
        return torch.matmul(attn, v)


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []
