"""Row softmax in two kernels: one walks each row for its max and sum, a second 2D grid writes exp(x - max) / sum."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_stats_kernel(x_ptr, m_ptr, s_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = tl.full((), -float("inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + c0 + cols, mask=c0 + cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    tl.store(m_ptr + row, m)
    tl.store(s_ptr + row, s)


@triton.jit
def softmax_apply_kernel(x_ptr, y_ptr, m_ptr, s_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    y = tl.exp(x - tl.load(m_ptr + row)) / tl.load(s_ptr + row)
    tl.store(y_ptr + row * stride + cols, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n_rows, n_cols = x.shape
        m = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        s = torch.empty(n_rows, device=x.device, dtype=torch.float32)
        row_stats_kernel[(n_rows,)](x, m, s, n_cols, x.stride(0), BLOCK=1024, num_warps=4)
        grid = (n_rows, triton.cdiv(n_cols, 1024))
        softmax_apply_kernel[grid](x, y, m, s, n_cols, x.stride(0), BLOCK=1024, num_warps=4)
        return y
