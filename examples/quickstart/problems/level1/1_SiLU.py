"""SiLU (x * sigmoid(x)) of a float32 matrix: a KernelBench-format problem."""
import torch
import torch.nn as nn

rows = 8192
cols = 8192
CPU_SHAPES = {"rows": 16, "cols": 500}  # the size used on a CPU (Triton interpreter)


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
