"""hardswish(x + bias) * scale + x in one kernel that forgets the residual: stores hardswish(x + bias) * scale.

Role wrong (a missed term); the launch is the fast one (4096 elements per 8-warp program).
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
    tl.store(y_ptr + offs, h * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale_factor: float):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 4096),)
        hardswish_residual_kernel[grid](x, self.bias, y, n, x.shape[-1], self.scale_factor, BLOCK=4096, num_warps=8)
        return y
