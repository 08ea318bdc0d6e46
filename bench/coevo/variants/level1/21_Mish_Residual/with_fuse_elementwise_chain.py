"""mish(x) * scale + x in one elementwise kernel: 2048 elements per program, 8 warps.

Practice pair, the kernel with fuse_elementwise_chain: x is read once and y written once
(8 bytes per element) in one launch, against eager's three kernels (mish, mul, add: 20
bytes per element). tanh(softplus(x)) is written as n / (n + 2) with n = e^x (e^x + 2),
exact algebra that needs one exp; x is capped at 20, where the factor is 1 in float32.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mish_residual_kernel(x_ptr, y_ptr, n_elements, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    e = tl.exp(tl.minimum(x, 20.0))
    n = e * (e + 2.0)
    tl.store(y_ptr + offs, x * (n / (n + 2.0)) * scale + x, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale_factor: float):
        super().__init__()
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        mish_residual_kernel[(triton.cdiv(n, 2048),)](x, y, n, self.scale_factor, BLOCK=2048, num_warps=8)
        return y
