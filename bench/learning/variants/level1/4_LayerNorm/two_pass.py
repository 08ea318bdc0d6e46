"""LayerNorm in two kernels: per-row mean and rstd from sums over 1024-wide chunks, then a 2D-grid normalise."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_stats_kernel(x_ptr, mean_ptr, rstd_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    acc2 = tl.zeros((BLOCK,), tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + c0 + cols, mask=c0 + cols < n_cols, other=0.0)
        acc += x
        acc2 += x * x
    mean = tl.sum(acc, axis=0) / n_cols
    var = tl.sum(acc2, axis=0) / n_cols - mean * mean
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(var + eps))


@triton.jit
def layernorm_apply_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    y = (x - tl.load(mean_ptr + row)) * tl.load(rstd_ptr + row) * w + b
    tl.store(y_ptr + row * stride + cols, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.empty_like(x2)
        n_rows, n_cols = x2.shape
        mean = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        rstd = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        row_stats_kernel[(n_rows,)](x2, mean, rstd, n_cols, x2.stride(0), self.eps, BLOCK=1024, num_warps=4)
        grid = (n_rows, triton.cdiv(n_cols, 1024))
        layernorm_apply_kernel[grid](x2, self.weight, self.bias, y, mean, rstd, n_cols, x2.stride(0),
                                     BLOCK=1024, num_warps=4)
        return y.view(x.shape)
