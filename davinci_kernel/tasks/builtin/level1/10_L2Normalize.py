"""L2 normalization of each row of a (batch, dim) float32 matrix: x / max(||x||_2, eps).

op_type: norm
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32768
dim = 4096

CPU_SHAPES = {"batch_size": 10, "dim": 333}
PERTURB = ["batch_size", "dim"]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, p=2.0, dim=1, eps=1e-12)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
