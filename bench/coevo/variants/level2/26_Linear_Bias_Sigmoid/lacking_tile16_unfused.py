"""The forward's linear layer and activation unfused with tiny tiles: a 16x16x16-tile GEMM, then a 32-wide kernel for the bias and the activation.

Practice pair, the kernel lacking gemm_tile128_fused_epilogue: each tile reloads its
operands for only 16x16 outputs, and the product makes a round trip through memory.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sigmoid(v):
    return tl.sigmoid(v)


@triton.jit
def matmul_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def bias_act_kernel(y_ptr, b_ptr, n_elements, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    acc = tl.load(y_ptr + offs, mask=mask, other=0.0) + tl.load(b_ptr + offs % N, mask=mask, other=0.0)
    tl.store(y_ptr + offs, sigmoid(acc), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        w = self.linear.weight.contiguous()
        M, K = x2.shape
        N = w.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))
        matmul_kernel[grid](x2, w, y, M, N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=1, num_stages=1)
        bias_act_kernel[(triton.cdiv(M * N, 32),)](y, self.linear.bias, M * N, N, BLOCK=32, num_warps=1)
        return y.reshape(*x.shape[:-1], N)
