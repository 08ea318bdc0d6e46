"""The forward's elementwise chain in one kernel with a poor launch: 32 elements per 1-warp program.

Practice pair, the kernel lacking fuse_elementwise_chain: each program moves only 128
bytes per load, too little in flight to approach the memory bandwidth.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softplus(v):
    return tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(tl.minimum(v, 20.0))))


@triton.jit
def chain_kernel(x_ptr, b_ptr, out_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0)
    tl.store(out_ptr + offs, softplus(x + b) + x * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale_factor: float):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        chain_kernel[(triton.cdiv(n, 32),)](x, self.bias, out, n, x.shape[-1], self.scale_factor,
                                          BLOCK=32, num_warps=1)
        return out
