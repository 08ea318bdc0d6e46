"""silu(x @ Wg^T) * (x @ Wu^T) as one dual Triton GEMM: 128x128x32 tiles, two accumulators, the SwiGLU epilogue before the one store, 8 warps.

Practice pair, the kernel with gemm_tile128_fused_epilogue: each x tile loaded feeds both
tl.dot calls, the 128x128 tiles reuse every operand 128 times on the tensor cores, and
silu(gate) * up is computed on the accumulators in registers, so neither projection is
ever written to memory (eager writes both and reads them back in two more kernels).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def dual_linear_swiglu_kernel(x_ptr, wg_ptr, wu_ptr, y_ptr, M, N, K,
                              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w_offs = rn[None, :] * K + kk[:, None]
        w_mask = (rn[None, :] < N) & (kk[:, None] < K)
        acc_g = tl.dot(a, tl.load(wg_ptr + w_offs, mask=w_mask, other=0.0), acc_g)
        acc_u = tl.dot(a, tl.load(wu_ptr + w_offs, mask=w_mask, other=0.0), acc_u)
    y = acc_g * tl.sigmoid(acc_g) * acc_u
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, hidden_features: int):
        super().__init__()
        self.gate_proj = nn.Linear(in_features, hidden_features, bias=False)
        self.up_proj = nn.Linear(in_features, hidden_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        wg = self.gate_proj.weight.contiguous()
        wu = self.up_proj.weight.contiguous()
        M, K = x2.shape
        N = wg.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        grid = (triton.cdiv(M, 128), triton.cdiv(N, 128))
        dual_linear_swiglu_kernel[grid](x2, wg, wu, y, M, N, K, BLOCK_M=128, BLOCK_N=128, BLOCK_K=32,
                                        num_warps=8, num_stages=3)
        return y.reshape(*x.shape[:-1], N)
