"""rmsnorm(x) * weight * silu(gate) in two kernels: per-row rstd over 1024-wide chunks, then a 2D-grid gated scale."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


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
def gate_apply_kernel(x_ptr, g_ptr, w_ptr, y_ptr, r_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    g = tl.load(g_ptr + row * stride + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * stride + cols, x * tl.load(r_ptr + row) * w * g * tl.sigmoid(g), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        g2 = gate.reshape(-1, x.shape[-1]).contiguous()
        y = torch.empty_like(x2)
        n_rows, n_cols = x2.shape
        rstd = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        row_rstd_kernel[(n_rows,)](x2, rstd, n_cols, x2.stride(0), self.eps, BLOCK=1024, num_warps=4)
        grid = (n_rows, triton.cdiv(n_cols, 1024))
        gate_apply_kernel[grid](x2, g2, self.weight, y, rstd, n_cols, x2.stride(0), BLOCK=1024, num_warps=4)
        return y.view(x.shape)
