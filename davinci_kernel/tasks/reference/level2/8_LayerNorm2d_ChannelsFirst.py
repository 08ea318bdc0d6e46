"""Channels-first LayerNorm in one Triton kernel. A program loads a [channels x pixels]
tile (pixels contiguous, so loads coalesce), reduces over the channel axis in registers,
and writes the normalized, affine-transformed tile: one read and one write of x."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm2d_kernel(x_ptr, w_ptr, b_ptr, y_ptr, C, HW, eps,
                       BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    pid_p = tl.program_id(0)
    n = tl.program_id(1)
    ch = tl.arange(0, BLOCK_C)
    px = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    c_ok = ch < C
    mask = c_ok[:, None] & (px[None, :] < HW)
    offs = n.to(tl.int64) * C * HW + ch[:, None] * HW + px[None, :]
    v = tl.load(x_ptr + offs, mask=mask, other=0.0)
    mean = tl.sum(v, axis=0) / C
    d = tl.where(mask, v - mean[None, :], 0.0)
    var = tl.sum(d * d, axis=0) / C
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + ch, mask=c_ok, other=0.0)
    b = tl.load(b_ptr + ch, mask=c_ok, other=0.0)
    y = d * rstd[None, :] * w[:, None] + b[:, None]
    tl.store(y_ptr + offs, y, mask=mask)


def layernorm2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float):
    x = x.contiguous()
    B, C = x.shape[0], x.shape[1]
    HW = x.numel() // (B * C)
    y = torch.empty_like(x)
    BLOCK_C = triton.next_power_of_2(C)
    BLOCK_P = max(1, min(triton.next_power_of_2(HW), 4096 // BLOCK_C))
    warps = 4 if BLOCK_C * BLOCK_P <= 2048 else 8
    grid = (triton.cdiv(HW, BLOCK_P), B)
    layernorm2d_kernel[grid](x, weight, bias, y, C, HW, eps,
                             BLOCK_C=BLOCK_C, BLOCK_P=BLOCK_P, num_warps=warps)
    return y


class ModelNew(nn.Module):
    def __init__(self, channels: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layernorm2d(x, self.weight, self.bias, self.eps)
