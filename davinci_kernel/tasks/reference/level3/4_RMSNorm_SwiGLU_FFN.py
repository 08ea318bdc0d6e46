"""LLaMA feed-forward block in three Triton kernels: a row RMSNorm, a dual GEMM computing
silu(h W1^T) * (h W3^T) from one pass over h, and the down projection with the residual
add in its epilogue."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, N, stride_x, stride_y, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    rstd = tl.math.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(y_ptr + row * stride_y + cols, x * rstd * w, mask=mask)


@triton.jit
def swiglu_dual_gemm_kernel(
    x_ptr, w1_ptr, w3_ptr, y_ptr, M, N, K,
    stride_xm, stride_wn, stride_ym,
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
    acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :],
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w_off = rn[None, :] * stride_wn + kk[:, None]
        w_mask = (kk[:, None] < K) & (rn[None, :] < N)
        acc1 = tl.dot(a, tl.load(w1_ptr + w_off, mask=w_mask, other=0.0), acc1)
        acc3 = tl.dot(a, tl.load(w3_ptr + w_off, mask=w_mask, other=0.0), acc3)
    out = acc1 * tl.sigmoid(acc1) * acc3
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], out,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def linear_residual_kernel(
    x_ptr, w_ptr, r_ptr, y_ptr, M, N, K,
    stride_xm, stride_wn, stride_rm, stride_ym,
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
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * stride_xm + kk[None, :],
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * stride_wn + kk[:, None],
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    acc = acc + tl.load(r_ptr + rm[:, None] * stride_rm + rn[None, :], mask=mask, other=0.0)
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc, mask=mask)


def rmsnorm(x2: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    M, N = x2.shape
    y = torch.empty_like(x2)
    BLOCK_N = triton.next_power_of_2(N)
    warps = 4 if BLOCK_N <= 2048 else 8
    rmsnorm_kernel[(M,)](x2, weight, y, N, x2.stride(0), y.stride(0), eps,
                         BLOCK_N=BLOCK_N, num_warps=warps)
    return y


def swiglu_dual_gemm(h: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor) -> torch.Tensor:
    M, K = h.shape
    N = w1.shape[0]
    w1 = w1.contiguous()
    w3 = w3.contiguous()
    y = torch.empty((M, N), device=h.device, dtype=h.dtype)
    BLOCK_M = max(16, min(128, triton.next_power_of_2(M)))
    BLOCK_N = max(16, min(64, triton.next_power_of_2(N)))
    BLOCK_K = 32
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    swiglu_dual_gemm_kernel[grid](
        h, w1, w3, y, M, N, K, h.stride(0), w1.stride(0), y.stride(0),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=8, num_warps=8, num_stages=3,
    )
    return y


def linear_residual(g: torch.Tensor, w2: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    M, K = g.shape
    N = w2.shape[0]
    w2 = w2.contiguous()
    y = torch.empty((M, N), device=g.device, dtype=g.dtype)
    BLOCK_M = max(16, min(128, triton.next_power_of_2(M)))
    BLOCK_N = max(16, min(128, triton.next_power_of_2(N)))
    BLOCK_K = 32
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    linear_residual_kernel[grid](
        g, w2, residual, y, M, N, K, g.stride(0), w2.stride(0), residual.stride(0), y.stride(0),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=8, num_warps=8, num_stages=3,
    )
    return y


class ModelNew(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, eps: float = 1e-6):
        super().__init__()
        self.norm_weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        h = rmsnorm(x2, self.norm_weight, self.eps)
        g = swiglu_dual_gemm(h, self.w1.weight, self.w3.weight)
        return linear_residual(g, self.w2.weight, x2).reshape(x.shape)
