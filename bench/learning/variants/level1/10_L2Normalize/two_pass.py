"""Row L2 normalisation in two kernels: row norms over 256-wide chunks, then a 2D-grid divide."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_norm_kernel(x_ptr, n_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + c0 + cols, mask=c0 + cols < n_cols, other=0.0)
        acc += x * x
    tl.store(n_ptr + row, tl.maximum(tl.sqrt(tl.sum(acc, axis=0)), eps))


@triton.jit
def l2norm_apply_kernel(x_ptr, y_ptr, n_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * stride + cols, x / tl.load(n_ptr + row), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n_rows, n_cols = x.shape
        norms = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        row_norm_kernel[(n_rows,)](x, norms, n_cols, x.stride(0), 1e-12, BLOCK=256, num_warps=2)
        grid = (n_rows, triton.cdiv(n_cols, 256))
        l2norm_apply_kernel[grid](x, y, norms, n_cols, x.stride(0), BLOCK=256, num_warps=2)
        return y
