"""Mean over dim 1: a (batch, column strip) grid, each program sums [32, 128] tiles down the reduced axis."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_kernel(x_ptr, y_ptr, R, D, stride_b, stride_r, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    r = tl.arange(0, BLOCK_R)
    acc = tl.zeros((BLOCK_R, BLOCK_D), tl.float32)
    for r0 in range(0, R, BLOCK_R):
        mask = (r0 + r[:, None] < R) & (d[None, :] < D)
        acc += tl.load(x_ptr + b * stride_b + (r0 + r[:, None]) * stride_r + d[None, :], mask=mask, other=0.0)
    tl.store(y_ptr + b * D + d, tl.sum(acc, axis=0) / R, mask=d < D)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, R, D = x.shape
        y = torch.empty((B, D), device=x.device, dtype=x.dtype)
        block_d = min(128, triton.next_power_of_2(D))
        grid = (B, triton.cdiv(D, block_d))
        mean_kernel[grid](x, y, R, D, x.stride(0), x.stride(1), BLOCK_R=32, BLOCK_D=block_d, num_warps=4)
        return y
