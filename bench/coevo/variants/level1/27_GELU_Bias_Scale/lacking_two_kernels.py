"""gelu(x + bias) * scale (erf form) in two kernels: the first op to a temporary, then the rest reading it back.

Practice pair, the kernel lacking fuse_elementwise_chain: the launches are wide (1024
elements, 4 warps), but the chain is split, so the temporary is written and read back in
two launches.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_bias_scale_act_kernel(x_ptr, b_ptr, t_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0)
    tl.store(t_ptr + offs, 0.5 * (x + b) * (1.0 + tl.math.erf((x + b) * 0.7071067811865476)), mask=mask)


@triton.jit
def gelu_bias_scale_rest_kernel(t_ptr, y_ptr, n_elements, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    t = tl.load(t_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, t * scale, mask=mask)


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
        grid = (triton.cdiv(n, 1024),)
        gelu_bias_scale_act_kernel[grid](x, self.bias, t, n, x.shape[-1], BLOCK=1024, num_warps=4)
        gelu_bias_scale_rest_kernel[grid](t, y, n, self.scale_factor, BLOCK=1024, num_warps=4)
        return y
