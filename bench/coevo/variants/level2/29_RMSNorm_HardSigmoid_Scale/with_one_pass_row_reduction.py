"""The forward's row norm and epilogue in one pass: one program per row holds the whole row in registers, 8 warps.

Practice pair, the kernel with one_pass_row_reduction: BLOCK is the next power of two of
the row; the sum of squares, the normalisation and the forward's epilogue happen on one
load of the row, with one store.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def hardsigmoid(v):
    return tl.minimum(tl.maximum(v / 6.0 + 0.5, 0.0), 1.0)


@triton.jit
def row_kernel(x_ptr, w_ptr, out_ptr, n_cols, stride, eps, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    rstd = tl.math.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    y = x * rstd * w
    tl.store(out_ptr + row * stride + cols, hardsigmoid(y) * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, scale: float, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size))
        self.scale = scale
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        out = torch.empty_like(x2)
        n_rows, n_cols = x2.shape
        block = triton.next_power_of_2(n_cols)
        row_kernel[(n_rows,)](x2, self.weight, out, n_cols, x2.stride(0), self.eps, self.scale,
                              BLOCK=block, num_warps=8)
        return out.view(x.shape)
