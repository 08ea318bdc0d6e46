"""ResNet basic block (inference) in two Triton kernels, one per conv stage. Each is an
implicit-GEMM 3x3 convolution over the NCHW input (rows: output pixels, columns: output
channels, reduction: 9 taps x in_channels) whose epilogue applies the batch norm from its
running statistics, the optional residual add and the ReLU, so every stage reads its
input once and writes its output once."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv3x3_bn_act_kernel(
    x_ptr, w_ptr, gamma_ptr, beta_ptr, mean_ptr, var_ptr, r_ptr, y_ptr,
    B, C_in, H, W, C_out, eps,
    ADD_RESIDUAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    HW = H * W
    M = B * HW
    K = C_in * 9

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < C_out
    b_idx = rm // HW
    pix = rm % HW
    oh = pix // W
    ow = pix % W
    x_img = x_ptr + b_idx * (C_in * HW)
    rk = tl.arange(0, BLOCK_K)

    w_cols = w_ptr + rn[None, :] * K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # One flat loop over (filter tap, input-channel block) so it software-pipelines; the
    # bounds test and pixel offset of a tap are per-row vectors, only the channel offset
    # is a 2-D add.
    c_blocks = tl.cdiv(C_in, BLOCK_K)
    for it in range(0, 9 * c_blocks):
        tap = it // c_blocks
        ci = (it % c_blocks) * BLOCK_K + rk
        ci_ok = ci < C_in
        ih = oh + tap // 3 - 1
        iw = ow + tap % 3 - 1
        row_ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a = tl.load((x_img + ih * W + iw)[:, None] + ci[None, :] * HW,
                    mask=row_ok[:, None] & ci_ok[None, :], other=0.0)
        w = tl.load(w_cols + (ci * 9 + tap)[:, None], mask=ci_ok[:, None] & n_ok[None, :],
                    other=0.0)
        acc = tl.dot(a, w, acc)

    gamma = tl.load(gamma_ptr + rn, mask=n_ok, other=1.0)
    beta = tl.load(beta_ptr + rn, mask=n_ok, other=0.0)
    mean = tl.load(mean_ptr + rn, mask=n_ok, other=0.0)
    var = tl.load(var_ptr + rn, mask=n_ok, other=1.0)
    scale = gamma * tl.math.rsqrt(var + eps)
    shift = beta - mean * scale
    out = acc * scale[None, :] + shift[None, :]
    mask = m_ok[:, None] & n_ok[None, :]
    y_off = (b_idx[:, None] * C_out + rn[None, :]) * HW + pix[:, None]
    if ADD_RESIDUAL:
        out = out + tl.load(r_ptr + y_off, mask=mask, other=0.0)
    tl.store(y_ptr + y_off, tl.maximum(out, 0.0), mask=mask)


def conv3x3_bn_act(x: torch.Tensor, weight: torch.Tensor, bn: nn.BatchNorm2d, residual=None):
    B, C_in, H, W = x.shape
    C_out = weight.shape[0]
    weight = weight.contiguous()
    y = torch.empty((B, C_out, H, W), device=x.device, dtype=x.dtype)
    r = residual if residual is not None else y
    M = B * H * W
    BLOCK_M = max(16, min(128, triton.next_power_of_2(M)))
    BLOCK_N = max(16, min(64, triton.next_power_of_2(C_out)))
    BLOCK_K = max(16, min(32, triton.next_power_of_2(C_in)))
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(C_out, BLOCK_N))
    conv3x3_bn_act_kernel[grid](
        x, weight, bn.weight, bn.bias, bn.running_mean, bn.running_var, r, y,
        B, C_in, H, W, C_out, bn.eps, ADD_RESIDUAL=residual is not None,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=4, num_stages=3,
    )
    return y


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        with torch.no_grad():
            for bn in (self.bn1, self.bn2):
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.2, 0.2)
                bn.running_mean.uniform_(-0.2, 0.2)
                bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        h = conv3x3_bn_act(x, self.conv1.weight, self.bn1)
        return conv3x3_bn_act(h, self.conv2.weight, self.bn2, residual=x)
