"""hardswish(x + bias) * scale + x unfused, poor launch: two kernels, 32 elements per 1-warp program.

Role slow (lacks fuse_elementwise_chain). The first kernel writes hardswish(x + bias) to a
temporary, the second reads it and x again: 20 bytes per element instead of 8, each kernel
at about a tenth of the memory bandwidth (128 bytes per 1-warp program in flight), so about
200 bandwidth-bytes per element against eager's 36: about 0.2x eager (its one-kernel
version, role medium, is about 0.45x).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_hardswish_kernel(x_ptr, b_ptr, t_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    v = tl.load(x_ptr + offs, mask=mask, other=0.0) + tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0)
    tl.store(t_ptr + offs, v * tl.minimum(tl.maximum(v + 3.0, 0.0), 6.0) / 6.0, mask=mask)


@triton.jit
def scale_residual_kernel(t_ptr, x_ptr, y_ptr, n_elements, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    t = tl.load(t_ptr + offs, mask=mask, other=0.0)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, t * scale + x, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale_factor: float):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        t = torch.empty_like(x)
        y = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 32),)
        bias_hardswish_kernel[grid](x, self.bias, t, n, x.shape[-1], BLOCK=32, num_warps=1)
        scale_residual_kernel[grid](t, x, y, n, self.scale_factor, BLOCK=32, num_warps=1)
        return y
