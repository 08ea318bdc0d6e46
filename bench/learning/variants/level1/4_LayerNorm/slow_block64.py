"""LayerNorm, poor launch: one 1-warp program per row walks it in 64-element chunks (sums, then output)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    acc2 = tl.zeros((BLOCK,), tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + c0 + cols, mask=c0 + cols < n_cols, other=0.0)
        acc += x
        acc2 += x * x
    mean = tl.sum(acc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(tl.sum(acc2, axis=0) / n_cols - mean * mean + eps)
    for c0 in range(0, n_cols, BLOCK):
        mask = c0 + cols < n_cols
        x = tl.load(x_ptr + row * stride + c0 + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + c0 + cols, mask=mask, other=0.0)
        b = tl.load(b_ptr + c0 + cols, mask=mask, other=0.0)
        tl.store(y_ptr + row * stride + c0 + cols, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.empty_like(x2)
        n_rows, n_cols = x2.shape
        layernorm_kernel[(n_rows,)](x2, self.weight, self.bias, y, n_cols, x2.stride(0), self.eps,
                                    BLOCK=64, num_warps=1)
        return y.view(x.shape)
