"""leaky_relu(x, slope) * scale + bias in one elementwise kernel: 4096 elements per program, 8 warps.

Practice pair, the kernel with fuse_elementwise_chain: x is read once and y written once
(8 bytes per element; the per-feature bias stays in L2) in one wide launch, against eager's
three kernels (leaky_relu, mul, add: 24 bytes per element).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def leaky_scale_bias_kernel(x_ptr, b_ptr, y_ptr, n_elements, n_cols, slope, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.where(x >= 0, x, x * slope) * scale + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, negative_slope: float, scale_factor: float):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.negative_slope = negative_slope
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 4096),)
        leaky_scale_bias_kernel[grid](x, self.bias, y, n, x.shape[-1], self.negative_slope, self.scale_factor,
                                      BLOCK=4096, num_warps=8)
        return y
