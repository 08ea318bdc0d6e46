"""The forward's row norm and epilogue in two kernels: a per-row rstd over 1024-wide chunks, then a 2D-grid apply.

Practice pair, the kernel lacking one_pass_row_reduction: x is read twice, the rstd makes
a round trip through memory, and there are two launches.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softplus(v):
    return tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(tl.minimum(v, 20.0))))


@triton.jit
def row_rstd_kernel(x_ptr, r_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + c0 + cols, mask=c0 + cols < n_cols, other=0.0)
        acc += x * x
    tl.store(r_ptr + row, tl.math.rsqrt(tl.sum(acc, axis=0) / n_cols + eps))


@triton.jit
def row_apply_kernel(x_ptr, w_ptr, out_ptr, r_ptr, n_cols, stride, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    y = x * tl.load(r_ptr + row) * w
    tl.store(out_ptr + row * stride + cols, softplus(y) * scale, mask=mask)


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
        rstd = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        row_rstd_kernel[(n_rows,)](x2, rstd, n_cols, x2.stride(0), self.eps, BLOCK=1024, num_warps=4)
        grid = (n_rows, triton.cdiv(n_cols, 1024))
        row_apply_kernel[grid](x2, self.weight, out, rstd, n_cols, x2.stride(0), self.scale, BLOCK=1024, num_warps=4)
        return out.view(x.shape)
