"""RMSNorm-SwiGLU FFN unfused: RMSNorm, three plain 64x64x32-tile GEMMs, a SwiGLU kernel and a residual-add kernel."""
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
def gemm_kernel(a_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def swiglu_add_kernel(a_ptr, b_ptr, y_ptr, n_elements, GATED: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    a = tl.load(a_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, a * tl.sigmoid(a) * b if GATED else a + b, mask=mask)


def gemm(a, w):
    M, K = a.shape
    N = w.shape[0]
    y = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
    gemm_kernel[grid](a, w, y, M, N, K, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2)
    return y


def elementwise(a, b, gated):
    y = torch.empty_like(a)
    swiglu_add_kernel[(triton.cdiv(a.numel(), 1024),)](a, b, y, a.numel(), GATED=gated, BLOCK=1024, num_warps=4)
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
        g = elementwise(gemm(h, w1), gemm(h, w3), gated=True)
        return elementwise(gemm(g, w2), x2, gated=False).view(x.shape)
