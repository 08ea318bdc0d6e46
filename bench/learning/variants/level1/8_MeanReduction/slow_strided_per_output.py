"""Mean over dim 1 with uncoalesced reads: one 1-warp program per output walks its column with stride D."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_kernel(x_ptr, y_ptr, R, D, stride_b, stride_r, BLOCK_R: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1)
    r = tl.arange(0, BLOCK_R)
    acc = tl.zeros((BLOCK_R,), tl.float32)
    for r0 in range(0, R, BLOCK_R):
        acc += tl.load(x_ptr + b * stride_b + (r0 + r) * stride_r + d, mask=r0 + r < R, other=0.0)
    tl.store(y_ptr + b * D + d, tl.sum(acc, axis=0) / R)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, R, D = x.shape
        y = torch.empty((B, D), device=x.device, dtype=x.dtype)
        mean_kernel[(B, D)](x, y, R, D, x.stride(0), x.stride(1), BLOCK_R=64, num_warps=1)
        return y
