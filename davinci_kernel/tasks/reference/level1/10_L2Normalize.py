"""Row L2 normalization in one pass: the row stays in registers between its norm and the division."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def l2norm_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0,
                eviction_policy="evict_first").to(tl.float32)
    norm = tl.sqrt(tl.sum(x * x, axis=0))
    y = x / tl.maximum(norm, eps)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def l2_normalize(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    assert x.dim() == 2
    x = x.contiguous()
    y = torch.empty_like(x)
    n_rows, n_cols = x.shape
    block = triton.next_power_of_2(n_cols)
    num_warps = min(16, max(4, block // 512))
    l2norm_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), eps, BLOCK=block, num_warps=num_warps)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return l2_normalize(x)
