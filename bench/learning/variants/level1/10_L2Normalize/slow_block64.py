"""Row L2 normalisation, poor launch: one 1-warp program per row walks it in 64-element chunks twice."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def l2norm_kernel(x_ptr, y_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + c0 + cols, mask=c0 + cols < n_cols, other=0.0)
        acc += x * x
    norm = tl.maximum(tl.sqrt(tl.sum(acc, axis=0)), eps)
    for c0 in range(0, n_cols, BLOCK):
        mask = c0 + cols < n_cols
        x = tl.load(x_ptr + row * stride + c0 + cols, mask=mask, other=0.0)
        tl.store(y_ptr + row * stride + c0 + cols, x / norm, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n_rows, n_cols = x.shape
        l2norm_kernel[(n_rows,)](x, y, n_cols, x.stride(0), 1e-12, BLOCK=64, num_warps=1)
        return y
