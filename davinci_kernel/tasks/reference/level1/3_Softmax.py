"""Row softmax in one pass over HBM: each program keeps a whole row in registers (read once, written
once) and walks rows persistently, so the next row's load is issued while the current one is reduced."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=-float("inf"),
                    eviction_policy="evict_first").to(tl.float32)
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        y = num / tl.sum(num, axis=0)
        tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor, num_warps: int = 16, stages: int = 3, programs_per_sm: int = 8) -> torch.Tensor:
    assert x.dim() == 2
    x = x.contiguous()
    n_rows, n_cols = x.shape
    assert x.numel() < 2**31, "int32 offsets"
    y = torch.empty_like(x)
    block = triton.next_power_of_2(n_cols)
    num_warps = min(num_warps, max(1, block // 256))
    if x.is_cuda:
        n_sm = torch.cuda.get_device_properties(x.device).multi_processor_count
        grid = min(n_rows, n_sm * programs_per_sm)
    else:
        grid = min(n_rows, 4)
    softmax_kernel[(grid,)](x, y, n_rows, n_cols, x.stride(0), y.stride(0), BLOCK=block, STAGES=stages,
                            num_warps=num_warps)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x)
