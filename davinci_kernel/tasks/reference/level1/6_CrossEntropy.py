"""Fused cross-entropy: one streaming pass per row with a per-lane online log-sum-exp, then a
deterministic one-program mean. The (batch, classes) log-probabilities are never written."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def ce_row_kernel(logits_ptr, targets_ptr, loss_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * stride_row
    cols = tl.arange(0, BLOCK)
    # Each lane keeps its own running max and rescaled sum; lanes are merged once at the end.
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(base + start + cols, mask=(start + cols) < n_cols, other=-float("inf"),
                    eviction_policy="evict_first").to(tl.float32)
        m_new = tl.maximum(m, x)
        m_ref = tl.where(m_new == -float("inf"), 0.0, m_new)  # lanes that have seen nothing yet
        s = s * tl.exp(m - m_ref) + tl.exp(x - m_ref)
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    target = tl.load(targets_ptr + row)
    x_target = tl.load(base + target).to(tl.float32)
    tl.store(loss_ptr + row, tl.log(total) + row_max - x_target)


@triton.jit
def mean_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        acc += tl.load(x_ptr + start + offs, mask=(start + offs) < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    assert logits.dim() == 2 and targets.dim() == 1 and targets.shape[0] == logits.shape[0]
    logits = logits.contiguous()
    targets = targets.contiguous()
    n_rows, n_cols = logits.shape
    losses = torch.empty(n_rows, device=logits.device, dtype=torch.float32)
    block = min(4096, triton.next_power_of_2(n_cols))
    ce_row_kernel[(n_rows,)](logits, targets, losses, n_cols, logits.stride(0), BLOCK=block,
                             num_warps=8 if block >= 2048 else 4)
    out = torch.empty((), device=logits.device, dtype=logits.dtype)
    mean_block = min(4096, triton.next_power_of_2(n_rows))
    mean_kernel[(1,)](losses, out, n_rows, BLOCK=mean_block, num_warps=4)
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return cross_entropy(logits, targets)
