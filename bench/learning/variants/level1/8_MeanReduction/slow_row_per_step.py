"""Mean over dim 1 with little parallelism: one program per batch entry adds one full row per loop step."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_kernel(x_ptr, y_ptr, R, D, stride_b, stride_r, BLOCK_D: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    acc = tl.zeros((BLOCK_D,), tl.float32)
    for r in range(0, R):
        acc += tl.load(x_ptr + b * stride_b + r * stride_r + d, mask=d < D, other=0.0)
    tl.store(y_ptr + b * D + d, acc / R, mask=d < D)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, R, D = x.shape
        y = torch.empty((B, D), device=x.device, dtype=x.dtype)
        block_d = triton.next_power_of_2(D)
        mean_kernel[(B,)](x, y, R, D, x.stride(0), x.stride(1), BLOCK_D=block_d, num_warps=4, num_stages=1)
        return y
