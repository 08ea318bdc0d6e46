"""rmsnorm(x) * weight * silu(gate) in two kernels: a column-loop row reduction with BLOCK 32, then a 32-wide 1-warp epilogue.

Role medium (lacks one_pass_row_reduction: x is read twice and the epilogue is a separate
launch). The first kernel (one 1-warp program per row, 32 columns per step) writes one rstd
per row; the second reads x and gate again with 32 elements per 1-warp program, which keeps
so few bytes in flight that it runs near a tenth of the memory bandwidth: about 130
bandwidth-bytes per element against eager's 48, about 0.4x eager. (The one-warp row loop of
bench/learning's slow_block64 measured 3.1x eager: a loop over a row pipelines its loads,
so the slowness here has to come from the tiny elementwise programs.)
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
def gate_kernel(x_ptr, g_ptr, r_ptr, w_ptr, y_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0)
    r = tl.load(r_ptr + offs // n_cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + offs % n_cols, mask=mask, other=0.0)
    tl.store(y_ptr + offs, x * r * w * g * tl.sigmoid(g), mask=mask)


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
        row_rstd_kernel[(n_rows,)](x2, rstd, n_cols, x2.stride(0), self.eps, BLOCK=32, num_warps=1)
        n = x2.numel()
        gate_kernel[(triton.cdiv(n, 32),)](x2, g2, rstd, self.weight, y, n, n_cols, BLOCK=32, num_warps=1)
        return y.view(x.shape)
