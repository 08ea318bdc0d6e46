"""Mean over the middle dimension of a (batch, dim1, dim2) float32 tensor, giving (batch, dim2).

op_type: reduction
"""
import torch
import torch.nn as nn

batch_size = 256
dim1 = 2048
dim2 = 512

CPU_SHAPES = {"batch_size": 3, "dim1": 70, "dim2": 19}
PERTURB = ["batch_size", "dim1", "dim2"]


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []
