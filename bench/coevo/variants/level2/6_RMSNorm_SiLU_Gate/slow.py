"""rmsnorm(x) * weight * silu(gate) in three kernels: a column-loop row reduction with BLOCK 32, then normalise and gate as two 32-wide 1-warp kernels through a temporary.

Role slow (lacks one_pass_row_reduction). Beside the row reduction (one 1-warp program per
row, 32 columns per step), two elementwise passes of 32 elements per 1-warp program move
x -> t and (t, gate) -> y (20 bytes per element instead of 12), each near a tenth of the
memory bandwidth: about 200 bandwidth-bytes per element against eager's 48, about 0.25x
eager (slower than role medium, which does the epilogue in one such pass).
"""
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
def normalize_kernel(x_ptr, r_ptr, w_ptr, t_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    r = tl.load(r_ptr + offs // n_cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + offs % n_cols, mask=mask, other=0.0)
    tl.store(t_ptr + offs, x * r * w, mask=mask)


@triton.jit
def silu_gate_kernel(t_ptr, g_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    t = tl.load(t_ptr + offs, mask=mask, other=0.0)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, t * g * tl.sigmoid(g), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        g2 = gate.reshape(-1, x.shape[-1]).contiguous()
        n_rows, n_cols = x2.shape
        rstd = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        row_rstd_kernel[(n_rows,)](x2, rstd, n_cols, x2.stride(0), self.eps, BLOCK=32, num_warps=1)
        n = x2.numel()
        grid = (triton.cdiv(n, 32),)
        t = torch.empty_like(x2)
        normalize_kernel[grid](x2, rstd, self.weight, t, n, n_cols, BLOCK=32, num_warps=1)
        y = torch.empty_like(x2)
        silu_gate_kernel[grid](t, g2, y, n, BLOCK=32, num_warps=1)
        return y.view(x.shape)
