"""clamp(x * sigmoid(x) * scale, lo, hi) + x in one elementwise kernel that forgets the residual + x."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def swish_clamp_kernel(x_ptr, y_ptr, n_elements, scale, lo, hi, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.clamp(x * tl.sigmoid(x) * scale, lo, hi)
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale_factor: float, clamp_min: float, clamp_max: float):
        super().__init__()
        self.scale_factor = scale_factor
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 4096),)
        swish_clamp_kernel[grid](x, y, n, self.scale_factor, self.clamp_min, self.clamp_max, BLOCK=4096, num_warps=8)
        return y
