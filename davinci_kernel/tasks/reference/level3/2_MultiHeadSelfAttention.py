"""Multi-head self-attention in three Triton kernels: the QKV projection GEMM, a fused
attention kernel (online softmax) that reads each head's Q, K and V straight out of the
packed QKV buffer and writes its output already in (batch, seq, embed) order, and the
output projection GEMM. No transposes or score matrices go through memory."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_bias_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym,
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
    acc = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def packed_attention_kernel(
    qkv_ptr, o_ptr, S, H, D, E, qk_scale, stride_qkv_b, stride_qkv_s, stride_o_b, stride_o_s,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = bh % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    cols0 = tl.arange(0, BLOCK_N)
    row_ok = rows < S
    d_ok = dims < D
    q_base = qkv_ptr + b * stride_qkv_b + h * D
    k_base = q_base + E
    v_base = q_base + 2 * E

    q = tl.load(q_base + rows[:, None] * stride_qkv_s + dims[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for start in range(0, S, BLOCK_N):
        cols = start + cols0
        col_ok = cols < S
        kt = tl.load(k_base + cols[None, :] * stride_qkv_s + dims[:, None],
                     mask=col_ok[None, :] & d_ok[:, None], other=0.0)
        s = tl.dot(q, kt) * qk_scale
        s = tl.where(col_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + cols[:, None] * stride_qkv_s + dims[None, :],
                    mask=col_ok[:, None] & d_ok[None, :], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + b * stride_o_b + h * D + rows[:, None] * stride_o_s + dims[None, :], out,
             mask=row_ok[:, None] & d_ok[None, :])


def linear_bias(x2: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    M, K = x2.shape
    N = weight.shape[0]
    y = torch.empty((M, N), device=x2.device, dtype=x2.dtype)
    BLOCK_M = max(16, min(128, triton.next_power_of_2(M)))
    BLOCK_N = max(16, min(128, triton.next_power_of_2(N)))
    BLOCK_K = 32
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    linear_bias_kernel[grid](
        x2, weight, bias, y, M, N, K,
        x2.stride(0), x2.stride(1), weight.stride(0), weight.stride(1), y.stride(0),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=8,
        num_warps=8, num_stages=3,
    )
    return y


def packed_attention(qkv: torch.Tensor, B: int, S: int, H: int, E: int) -> torch.Tensor:
    D = E // H
    o = torch.empty((B * S, E), device=qkv.device, dtype=qkv.dtype)
    BLOCK_D = max(16, triton.next_power_of_2(D))
    BLOCK_M = max(16, min(128 if BLOCK_D <= 64 else 64, triton.next_power_of_2(S)))
    BLOCK_N = max(16, min(64, triton.next_power_of_2(S)))
    qk_scale = (D ** -0.5) * 1.4426950408889634
    grid = (triton.cdiv(S, BLOCK_M), B * H)
    packed_attention_kernel[grid](
        qkv, o, S, H, D, E, qk_scale, S * qkv.stride(0), qkv.stride(0), S * o.stride(0), o.stride(0),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D, num_warps=8, num_stages=3,
    )
    return o


class ModelNew(nn.Module):
    def __init__(self, embed_dim: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, E = x.shape
        x2 = x.reshape(B * S, E).contiguous()
        qkv = linear_bias(x2, self.qkv.weight, self.qkv.bias)
        o = packed_attention(qkv, B, S, self.num_heads, E)
        return linear_bias(o, self.proj.weight, self.proj.bias).reshape(B, S, E)
