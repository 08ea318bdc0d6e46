"""Row L2 normalisation in one pass that forgets the square root: divides by the sum of squares."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def l2norm_kernel(x_ptr, y_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    norm = tl.sum(x * x, axis=0)
    tl.store(y_ptr + row * stride + cols, x / tl.maximum(norm, eps), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n_rows, n_cols = x.shape
        block = triton.next_power_of_2(n_cols)
        l2norm_kernel[(n_rows,)](x, y, n_cols, x.stride(0), 1e-12, BLOCK=block, num_warps=8)
        return y
