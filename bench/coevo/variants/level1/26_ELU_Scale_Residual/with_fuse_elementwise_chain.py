"""elu(x) * scale + x in one elementwise kernel: 4096 elements per program, 8 warps.

Practice pair, the kernel with fuse_elementwise_chain: each input element is read once and
each output written once, in one wide launch, against eager's three kernels (elu, mul, add).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def elu_scale_residual_kernel(x_ptr, y_ptr, n_elements, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    t = tl.where(x > 0, x, tl.exp(x) - 1.0)
    tl.store(y_ptr + offs, t * scale + x, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale_factor: float):
        super().__init__()
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 4096),)
        elu_scale_residual_kernel[grid](x, y, n, self.scale_factor, BLOCK=4096, num_warps=8)
        return y
