"""softplus(x + bias) * scale + x in one kernel with a poor launch: 32 elements per 1-warp program.

Practice pair, the kernel lacking fuse_elementwise_chain: the chain is in one kernel, but
each 1-warp program moves only 128 bytes per load, too little in flight to approach the
memory bandwidth; widening the launch to 1024-4096 elements and 4-8 warps is the fix.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softplus_bias_residual_kernel(x_ptr, b_ptr, y_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0)
    t = tl.where(x + b > 20.0, x + b, tl.log(1.0 + tl.exp(tl.minimum(x + b, 20.0))))
    tl.store(y_ptr + offs, t * scale + x, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale_factor: float):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 32),)
        softplus_bias_residual_kernel[grid](x, self.bias, y, n, x.shape[-1], self.scale_factor, BLOCK=32, num_warps=1)
        return y
