"""Mean over the middle axis: each program owns a strip of contiguous output columns, walks the reduced
axis in [BLOCK_R, BLOCK_D] tiles (coalesced along the last axis, loads pipelined STAGES deep) and sums
the tile once at the end."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_dim1_kernel(x_ptr, y_ptr, R, D, stride_xb, stride_xr, stride_xd, stride_yb, stride_yd,
                     BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, STAGES: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_r = tl.arange(0, BLOCK_R)
    d_ok = offs_d < D
    base = x_ptr + b * stride_xb + offs_d[None, :] * stride_xd
    acc = tl.zeros((BLOCK_R, BLOCK_D), dtype=tl.float32)
    for r0 in tl.range(0, R, BLOCK_R, num_stages=STAGES):
        r = r0 + offs_r
        x = tl.load(base + r[:, None] * stride_xr, mask=(r[:, None] < R) & d_ok[None, :], other=0.0,
                    eviction_policy="evict_first")
        acc += x.to(tl.float32)
    mean = tl.sum(acc, axis=0) / R
    tl.store(y_ptr + b * stride_yb + offs_d * stride_yd, mean.to(y_ptr.dtype.element_ty), mask=d_ok)


def mean_dim1(x: torch.Tensor, block_r: int = 16, block_d: int = 512, stages: int = 4,
              num_warps: int = 4) -> torch.Tensor:
    assert x.dim() == 3
    B, R, D = x.shape
    y = torch.empty((B, D), device=x.device, dtype=x.dtype)
    block_d = min(block_d, triton.next_power_of_2(D))
    grid = (B, triton.cdiv(D, block_d))
    mean_dim1_kernel[grid](x, y, R, D, x.stride(0), x.stride(1), x.stride(2), y.stride(0), y.stride(1),
                           BLOCK_R=block_r, BLOCK_D=block_d, STAGES=stages, num_warps=num_warps)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mean_dim1(x)
