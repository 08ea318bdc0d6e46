"""RMSNorm-SwiGLU FFN in three kernels: a one-pass row RMSNorm, a 128x128x32-tile dual GEMM with the SwiGLU
epilogue, a 128x128x32-tile GEMM with the residual epilogue (8 warps).

Practice pair, the kernel with gemm_tile128_fused_epilogue (bench/learning's fused_tile128 with
128-wide N tiles): both GEMMs apply their epilogue (silu(gate) * up; + residual) to the
accumulators in registers before their one store, so no intermediate of the FFN is written
and read back except h and the SwiGLU output.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, h_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    rstd = tl.math.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(h_ptr + row * n_cols + cols, x * rstd * w, mask=mask)


@triton.jit
def gemm_kernel(a_ptr, w_ptr, w3_ptr, r_ptr, y_ptr, M, N, K, GATED: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    acc3 = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w_offs = rn[None, :] * K + kk[:, None]
        w_mask = (rn[None, :] < N) & (kk[:, None] < K)
        acc = tl.dot(a, tl.load(w_ptr + w_offs, mask=w_mask, other=0.0), acc)
        if GATED:
            acc3 = tl.dot(a, tl.load(w3_ptr + w_offs, mask=w_mask, other=0.0), acc3)
    offs = rm[:, None] * N + rn[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if GATED:
        acc = acc * tl.sigmoid(acc) * acc3
    else:
        acc += tl.load(r_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, acc, mask=mask)


def gemm(a, w, w3, r, gated):
    M, K = a.shape
    N = w.shape[0]
    y = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, 128), triton.cdiv(N, 128))
    gemm_kernel[grid](a, w, w3, r, y, M, N, K, GATED=gated, BLOCK_M=128, BLOCK_N=128, BLOCK_K=32,
                      num_warps=8, num_stages=3)
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
        h = torch.empty_like(x2)
        rmsnorm_kernel[(x2.shape[0],)](x2, self.norm_weight, h, x2.shape[1], self.eps,
                                       BLOCK=triton.next_power_of_2(x2.shape[1]), num_warps=4)
        w1, w3, w2 = self.w1.weight.contiguous(), self.w3.weight.contiguous(), self.w2.weight.contiguous()
        g = gemm(h, w1, w3, h, gated=True)
        return gemm(g, w2, w2, x2, gated=False).view(x.shape)
