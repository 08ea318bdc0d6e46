"""hardswish(x + bias) * scale + x in one kernel with a poor launch: 32 elements per 1-warp program.

Role medium (lacks fuse_elementwise_chain: the chain is fused but the launch is tiny). Each
program moves 128 bytes per load, and at most 32 one-warp programs fit on an SM, so few bytes
are in flight and the kernel runs near a tenth of the memory bandwidth: about 80
bandwidth-bytes per element against eager's 36, i.e. about 0.45x eager (the same launch on
the Swish sibling, whose eager moves 48 bytes per element, measured 0.60x on the H200).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def hardswish_residual_kernel(x_ptr, b_ptr, y_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    v = x + tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0)
    h = v * tl.minimum(tl.maximum(v + 3.0, 0.0), 6.0) / 6.0
    tl.store(y_ptr + offs, h * scale + x, mask=mask)


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
        hardswish_residual_kernel[grid](x, self.bias, y, n, x.shape[-1], self.scale_factor, BLOCK=32, num_warps=1)
        return y
