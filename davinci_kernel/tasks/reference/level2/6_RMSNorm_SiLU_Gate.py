"""rmsnorm(x) * weight * silu(gate) as one row-wise Triton kernel: each program reads its
row of x and gate once, reduces the mean square in registers and writes the result."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_silu_gate_kernel(x_ptr, g_ptr, w_ptr, y_ptr, N, stride_x, stride_g, stride_y, eps,
                             BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    g = tl.load(g_ptr + row * stride_g + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    rstd = tl.math.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    y = x * rstd * w * (g * tl.sigmoid(g))
    tl.store(y_ptr + row * stride_y + cols, y, mask=mask)


def rmsnorm_silu_gate(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float):
    N = x.shape[-1]
    x2 = x.reshape(-1, N)
    g2 = gate.reshape(-1, N)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if g2.stride(-1) != 1:
        g2 = g2.contiguous()
    rows = x2.shape[0]
    y = torch.empty((rows, N), device=x.device, dtype=x.dtype)
    BLOCK_N = triton.next_power_of_2(N)
    warps = 4 if BLOCK_N <= 1024 else (8 if BLOCK_N <= 4096 else 16)
    rmsnorm_silu_gate_kernel[(rows,)](x2, g2, weight, y, N, x2.stride(0), g2.stride(0), y.stride(0),
                                      eps, BLOCK_N=BLOCK_N, num_warps=warps)
    return y.reshape(x.shape)


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return rmsnorm_silu_gate(x, gate, self.weight, self.eps)
