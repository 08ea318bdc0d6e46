"""Multi-head self-attention layer (no mask): a fused QKV projection, per-head
softmax(Q K^T / sqrt(d)) V, and an output projection, float32, (batch, seq, embed) input.

op_type: architecture/attention
"""
import torch
import torch.nn as nn

batch_size = 16
seq_len = 512
embed_dim = 1024
num_heads = 16

CPU_SHAPES = {"batch_size": 2, "seq_len": 24, "embed_dim": 64, "num_heads": 4}
PERTURB = ["batch_size", "seq_len"]


class Model(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, E = x.shape
        H = self.num_heads
        D = E // H
        qkv = self.qkv(x).reshape(B, S, 3, H, D).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (D ** -0.5), dim=-1)
        y = torch.matmul(attn, v).transpose(1, 2).reshape(B, S, E)
        return self.proj(y)


def get_inputs():
    return [torch.randn(batch_size, seq_len, embed_dim)]


def get_init_inputs():
    return [embed_dim, num_heads]
