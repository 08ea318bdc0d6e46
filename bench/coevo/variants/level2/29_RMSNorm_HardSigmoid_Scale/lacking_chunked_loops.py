"""The forward's row norm and epilogue in one kernel that loops twice over 256-wide chunks of each row, 2 warps.

Practice pair, the kernel lacking one_pass_row_reduction: each row is loaded twice in
small chunks instead of held in registers once.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def hardsigmoid(v):
    return tl.minimum(tl.maximum(v / 6.0 + 0.5, 0.0), 1.0)


@triton.jit
def row_chunked_kernel(x_ptr, w_ptr, out_ptr, n_cols, stride, eps, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + c0 + offs, mask=c0 + offs < n_cols, other=0.0)
        acc += x * x
    rstd = tl.math.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + offs
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
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
        row_chunked_kernel[(n_rows,)](x2, self.weight, out, n_cols, x2.stride(0), self.eps, self.scale,
                                      BLOCK=256, num_warps=2)
        return out.view(x.shape)
