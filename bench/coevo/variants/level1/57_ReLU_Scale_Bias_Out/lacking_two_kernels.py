"""The forward's elementwise chain in two kernels: the first statement to a temporary, then the rest.

Practice pair, the kernel lacking fuse_elementwise_chain: the launches are wide (1024
elements, 4 warps), but the chain is split, so the temporary is written and read back.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu(v):
    return tl.maximum(v, 0.0)


@triton.jit
def first_kernel(x_ptr, b_ptr, y_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = relu(x * scale)
    tl.store(y_ptr + offs, y, mask=mask)


@triton.jit
def rest_kernel(y_ptr, x_ptr, b_ptr, out_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0)
    tl.store(out_ptr + offs, y + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale_factor: float):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        y = torch.empty_like(x)
        grid = (triton.cdiv(n, 1024),)
        first_kernel[grid](x, self.bias, y, n, x.shape[-1], self.scale_factor, BLOCK=1024, num_warps=4)
        rest_kernel[grid](y, x, self.bias, out, n, x.shape[-1], self.scale_factor, BLOCK=1024, num_warps=4)
        return out
