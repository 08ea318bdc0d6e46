"""Row softmax with a poor launch: one 1-warp program per row walks it in 32-element chunks three times."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = tl.full((), -float("inf"), tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + c0 + cols, mask=c0 + cols < n_cols, other=-float("inf"))
        m = tl.maximum(m, tl.max(x, axis=0))
    s = tl.zeros((), tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + c0 + cols, mask=c0 + cols < n_cols, other=-float("inf"))
        s += tl.sum(tl.exp(x - m), axis=0)
    for c0 in range(0, n_cols, BLOCK):
        mask = c0 + cols < n_cols
        x = tl.load(x_ptr + row * stride + c0 + cols, mask=mask, other=-float("inf"))
        tl.store(y_ptr + row * stride + c0 + cols, tl.exp(x - m) / s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n_rows, n_cols = x.shape
        softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), BLOCK=32, num_warps=1)
        return y
