"""Conv2d + bias + extra bias + ReLU + 2x2 max-pool in one Triton kernel.

The convolution is an implicit GEMM (rows: pooled output pixels, columns: output
channels, reduction: filter taps x in_channels) read straight from the NCHW input. Each
program computes the four conv outputs under every 2x2 pooling window one after another
and keeps their running max, so the full-resolution activation is never written to memory.
ReLU and the per-channel bias commute with the max, so they run once on the pooled tile.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv_bias_relu_pool_kernel(
    x_ptr, w_ptr, cb_ptr, eb_ptr, y_ptr,
    B, C_in, H, W, C_out, PH, PW, PAD,
    KH: tl.constexpr, KW: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    M = B * PH * PW
    HW = H * W
    K = C_in * KH * KW

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < C_out
    b_idx = rm // (PH * PW)
    p_rem = rm % (PH * PW)
    ph = p_rem // PW
    pw = p_rem % PW
    x_img = x_ptr + b_idx * (C_in * HW)
    rk = tl.arange(0, BLOCK_K)
    w_cols = w_ptr + rn[None, :] * K
    c_blocks = tl.cdiv(C_in, BLOCK_K)

    best = tl.full((BLOCK_M, BLOCK_N), float("-inf"), dtype=tl.float32)
    for dy in tl.static_range(2):
        for dx in tl.static_range(2):
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            # One flat loop over (filter tap, input-channel block) so it pipelines even
            # when C_in fits in one block; the bounds test and pixel offset of a tap are
            # per-row vectors, only the channel offset is a 2-D add.
            for it in range(0, KH * KW * c_blocks):
                tap = it // c_blocks
                ci = (it % c_blocks) * BLOCK_K + rk
                ci_ok = ci < C_in
                ih = ph * 2 + dy + tap // KW - PAD
                iw = pw * 2 + dx + tap % KW - PAD
                row_ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                a = tl.load((x_img + ih * W + iw)[:, None] + ci[None, :] * HW,
                            mask=row_ok[:, None] & ci_ok[None, :], other=0.0)
                w = tl.load(w_cols + (ci * (KH * KW) + tap)[:, None],
                            mask=ci_ok[:, None] & n_ok[None, :], other=0.0)
                acc = tl.dot(a, w, acc)
            best = tl.maximum(best, acc)

    bias = tl.load(cb_ptr + rn, mask=n_ok, other=0.0) + tl.load(eb_ptr + rn, mask=n_ok, other=0.0)
    out = tl.maximum(best + bias[None, :], 0.0)
    y_off = (b_idx[:, None] * C_out + rn[None, :]) * (PH * PW) + (ph * PW + pw)[:, None]
    tl.store(y_ptr + y_off, out, mask=m_ok[:, None] & n_ok[None, :])


def conv_bias_relu_pool(x, weight, conv_bias, extra_bias):
    x = x.contiguous()
    weight = weight.contiguous()
    B, C_in, H, W = x.shape
    C_out, _, KH, KW = weight.shape
    pad = KH // 2
    OH = H + 2 * pad - KH + 1
    OW = W + 2 * pad - KW + 1
    PH, PW = OH // 2, OW // 2
    y = torch.empty((B, C_out, PH, PW), device=x.device, dtype=x.dtype)
    M = B * PH * PW
    BLOCK_M = max(16, min(128, triton.next_power_of_2(M)))
    BLOCK_N = max(16, min(64, triton.next_power_of_2(C_out)))
    BLOCK_K = max(16, min(32, triton.next_power_of_2(C_in)))
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(C_out, BLOCK_N))
    conv_bias_relu_pool_kernel[grid](
        x, weight, conv_bias, extra_bias.reshape(-1), y,
        B, C_in, H, W, C_out, PH, PW, pad,
        KH=KH, KW=KW, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        num_warps=4, num_stages=3,
    )
    return y


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return conv_bias_relu_pool(x, self.conv.weight, self.conv.bias, self.bias)
