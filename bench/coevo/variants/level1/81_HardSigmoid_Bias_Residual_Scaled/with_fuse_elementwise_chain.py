"""The forward's elementwise chain in one kernel: 4096 elements per program, 8 warps.

Practice pair, the kernel with fuse_elementwise_chain: the kernel's lines are the forward's
statements; each input element is read once and each output written once.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def hardsigmoid(v):
    return tl.minimum(tl.maximum(v / 6.0 + 0.5, 0.0), 1.0)


@triton.jit
def chain_kernel(x_ptr, b_ptr, out_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0)
    tl.store(out_ptr + offs, hardsigmoid(x + b) + x * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale_factor: float):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        chain_kernel[(triton.cdiv(n, 4096),)](x, self.bias, out, n, x.shape[-1], self.scale_factor,
                                          BLOCK=4096, num_warps=8)
        return out
