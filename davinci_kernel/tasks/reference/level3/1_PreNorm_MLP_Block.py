"""Pre-norm MLP block in three Triton kernels: a row LayerNorm, fc1 with bias + GELU in the
GEMM epilogue, and fc2 with bias + the residual add in the GEMM epilogue."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, stride_x, stride_y, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    v = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    mean = tl.sum(v, axis=0) / N
    d = tl.where(mask, v - mean, 0.0)
    rstd = tl.math.rsqrt(tl.sum(d * d, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * stride_y + cols, d * rstd * w + b, mask=mask)


@triton.jit
def linear_kernel(
    x_ptr, w_ptr, b_ptr, r_ptr, y_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_rm, stride_ym,
    APPLY_GELU: tl.constexpr, ADD_RESIDUAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # y = act(x @ w^T + b) (+ r); row-tiles are walked in bands of GROUP_M for L2 reuse.
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
    acc = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    if APPLY_GELU:
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    if ADD_RESIDUAL:
        acc = acc + tl.load(r_ptr + rm[:, None] * stride_rm + rn[None, :], mask=mask, other=0.0)
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc, mask=mask)


def layernorm(x2: torch.Tensor, weight, bias, eps) -> torch.Tensor:
    M, N = x2.shape
    y = torch.empty_like(x2)
    BLOCK_N = triton.next_power_of_2(N)
    warps = 4 if BLOCK_N <= 2048 else 8
    layernorm_kernel[(M,)](x2, weight, bias, y, N, x2.stride(0), y.stride(0), eps,
                           BLOCK_N=BLOCK_N, num_warps=warps)
    return y


def linear(x2, weight, bias, residual=None, gelu=False) -> torch.Tensor:
    M, K = x2.shape
    N = weight.shape[0]
    y = torch.empty((M, N), device=x2.device, dtype=x2.dtype)
    r = residual if residual is not None else y
    BLOCK_M = max(16, min(128, triton.next_power_of_2(M)))
    BLOCK_N = max(16, min(128, triton.next_power_of_2(N)))
    BLOCK_K = 32
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    linear_kernel[grid](
        x2, weight, bias, r, y, M, N, K,
        x2.stride(0), x2.stride(1), weight.stride(0), weight.stride(1), r.stride(0), y.stride(0),
        APPLY_GELU=gelu, ADD_RESIDUAL=residual is not None,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=8,
        num_warps=8, num_stages=3,
    )
    return y


class ModelNew(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, dim)
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(dim))
            self.norm.bias.copy_(0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        h = layernorm(x2, self.norm.weight, self.norm.bias, self.norm.eps)
        h = linear(h, self.fc1.weight, self.fc1.bias, gelu=True)
        y = linear(h, self.fc2.weight, self.fc2.bias, residual=x2)
        return y.reshape(x.shape)
