"""relu(x + bias) * scale in one elementwise kernel: 4096 elements per program, 8 warps.

Practice pair, the kernel with fuse_elementwise_chain: each input element is read once and
each output written once, in one wide launch, against eager's three kernels (add, relu, mul).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_bias_scale_kernel(x_ptr, b_ptr, y_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0)
    t = tl.maximum(x + b, 0.0)
    tl.store(y_ptr + offs, t * scale, mask=mask)


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
        relu_bias_scale_kernel[grid](x, self.bias, y, n, x.shape[-1], self.scale_factor, BLOCK=4096, num_warps=8)
        return y
