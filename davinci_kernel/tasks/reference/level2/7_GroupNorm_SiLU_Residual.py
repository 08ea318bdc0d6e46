"""x + silu(GroupNorm(x)) in one Triton kernel. One program owns one (sample, group): the
group's channels are contiguous in NCHW, so it streams them once to accumulate the sum
and sum of squares, then once more to normalize, apply the per-channel affine, the SiLU
and the skip connection."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def groupnorm_silu_residual_kernel(x_ptr, w_ptr, b_ptr, y_ptr, C, HW, group_channels, eps,
                                   BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    group_size = group_channels * HW
    groups = C // group_channels
    g = pid % groups
    base = pid.to(tl.int64) * group_size
    offs = tl.arange(0, BLOCK)

    s1 = tl.zeros((BLOCK,), dtype=tl.float32)
    s2 = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, group_size, BLOCK):
        idx = start + offs
        v = tl.load(x_ptr + base + idx, mask=idx < group_size, other=0.0)
        s1 += v
        s2 += v * v
    mean = tl.sum(s1, axis=0) / group_size
    var = tl.maximum(tl.sum(s2, axis=0) / group_size - mean * mean, 0.0)
    rstd = tl.math.rsqrt(var + eps)

    for start in range(0, group_size, BLOCK):
        idx = start + offs
        mask = idx < group_size
        c = g * group_channels + idx // HW
        v = tl.load(x_ptr + base + idx, mask=mask, other=0.0)
        w = tl.load(w_ptr + c, mask=mask, other=0.0)
        b = tl.load(b_ptr + c, mask=mask, other=0.0)
        h = (v - mean) * rstd * w + b
        tl.store(y_ptr + base + idx, v + h * tl.sigmoid(h), mask=mask)


def groupnorm_silu_residual(x, weight, bias, num_groups, eps):
    x = x.contiguous()
    B, C = x.shape[0], x.shape[1]
    HW = x.numel() // (B * C)
    y = torch.empty_like(x)
    group_channels = C // num_groups
    BLOCK = min(4096, triton.next_power_of_2(group_channels * HW))
    groupnorm_silu_residual_kernel[(B * num_groups,)](
        x, weight, bias, y, C, HW, group_channels, eps, BLOCK=BLOCK, num_warps=8)
    return y


class ModelNew(nn.Module):
    def __init__(self, channels: int, num_groups: int):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(channels))
            self.norm.bias.copy_(0.1 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return groupnorm_silu_residual(x, self.norm.weight, self.norm.bias,
                                       self.norm.num_groups, self.norm.eps)
