"""Linear + scale + residual in one Triton GEMM (epilogue fusion), then a row-wise
LayerNorm kernel that normalizes the result in place: two passes instead of five."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_scale_residual_kernel(
    x_ptr, w_ptr, b_ptr, r_ptr, y_ptr,
    M, N, K, scale,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_rm, stride_rn, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    band_size = GROUP_M * tiles_n
    band = pid // band_size
    band_start = band * GROUP_M
    band_rows = tl.minimum(tiles_m - band_start, GROUP_M)
    local = pid - band * band_size
    pid_m = band_start + local % band_rows
    pid_n = local // band_rows

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    x_rows = x_ptr + rm[:, None] * stride_xm
    w_cols = w_ptr + rn[None, :] * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_rows + kk[None, :] * stride_xk,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_cols + kk[:, None] * stride_wk,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)

    mask = (rm[:, None] < M) & (rn[None, :] < N)
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    res = tl.load(r_ptr + rm[:, None] * stride_rm + rn[None, :] * stride_rn, mask=mask, other=0.0)
    out = (acc + bias[None, :]) * scale + res
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :] * stride_yn, out, mask=mask)


@triton.jit
def layernorm_rows_kernel(y_ptr, g_ptr, b_ptr, N, stride_row, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    ptrs = y_ptr + row * stride_row + cols
    v = tl.load(ptrs, mask=mask, other=0.0)
    mean = tl.sum(v, axis=0) / N
    d = tl.where(mask, v - mean, 0.0)
    var = tl.sum(d * d, axis=0) / N
    rstd = tl.math.rsqrt(var + eps)
    g = tl.load(g_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(ptrs, d * rstd * g + b, mask=mask)


def linear_scale_residual_layernorm(x, weight, bias, residual, scale, ln_weight, ln_bias, eps):
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    M, K = x2.shape
    N = weight.shape[0]
    r2 = residual.reshape(-1, N)
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    BLOCK_M = max(16, min(128, triton.next_power_of_2(M)))
    BLOCK_N = max(16, min(128, triton.next_power_of_2(N)))
    BLOCK_K = 32
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    linear_scale_residual_kernel[grid](
        x2, weight, bias, r2, y, M, N, K, scale,
        x2.stride(0), x2.stride(1), weight.stride(0), weight.stride(1),
        r2.stride(0), r2.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=8,
        num_warps=8, num_stages=3,
    )
    BLOCK_ROW = triton.next_power_of_2(N)
    warps = 4 if BLOCK_ROW <= 2048 else 8
    layernorm_rows_kernel[(M,)](y, ln_weight, ln_bias, N, y.stride(0), eps,
                                BLOCK_N=BLOCK_ROW, num_warps=warps)
    return y.reshape(*lead, N)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale_factor: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features, eps=1e-5)
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return linear_scale_residual_layernorm(
            x, self.linear.weight, self.linear.bias, residual, self.scale_factor,
            self.norm.weight, self.norm.bias, self.norm.eps)
