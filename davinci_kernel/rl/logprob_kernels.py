"""The softmax math of token log-probs over one chunk of logits rows, in one pass each way.

Covers two steps that ``losses.py`` runs per row chunk of a (c, V) logits block:
- ``chunk_stats``: log π(target) and the log-sum-exp of ``logits / T`` per row, float32;
- ``chunk_dlogits_``: d loss / d logits = (onehot − softmax) · g / T, written over the block
  (or into a given output).

On CUDA each is one Triton kernel that reads the block once (and writes it once, backward)
in its own dtype, with float32 math in registers: the plain torch version makes a float32
copy, divides, subtracts, exponentiates and scales as separate passes over a block that is
hundreds of MB for a 152k vocabulary. Elsewhere (CPU, or when ``TRITON_INTERPRET=1`` is not
set for CPU tensors) the same math runs in torch, chunk by chunk; so does everything after
a kernel fails to compile or launch (one warning, then torch for the rest of the process).

Does not cover: the matmuls with the output head or the choice of chunks (``losses.py``).
"""

from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger(__name__)

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton ships with torch on Linux
    triton = None

BLOCK_V = 4096  # vocabulary columns a program works on at once


# triton.jit picks the interpreter when the kernels are defined, so read the switch then
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


ENABLED = True  # False: the torch math everywhere (a side-by-side baseline in bench/logprobs.py)


def _give_up(e: Exception) -> None:
    """A kernel that cannot compile or launch here (an old GPU, a Triton without a feature)
    turns the kernels off for the process: the torch math takes over, with one warning."""
    global ENABLED
    ENABLED = False
    log.warning("log-prob Triton kernels unavailable (%s: %s); using torch math", type(e).__name__, str(e)[:200])


def use_triton(x: torch.Tensor) -> bool:
    """Triton kernels for this tensor: on CUDA, or on CPU under the interpreter."""
    if triton is None or not ENABLED:
        return False
    return x.device.type == "cpu" if _INTERPRETED else x.is_cuda


if triton is not None:

    @triton.jit
    def _stats_kernel(z_ptr, t_ptr, logp_ptr, lse_ptr, V, stride, inv_t, BLOCK: tl.constexpr):
        # one program per row: online max and sum of exp over the row, BLOCK columns at a time
        row = tl.program_id(0).to(tl.int64)
        base = z_ptr + row * stride
        cols = tl.arange(0, BLOCK)
        m = tl.full((), float("-inf"), tl.float32)
        s = tl.full((), 0.0, tl.float32)
        for start in range(0, V, BLOCK):
            c = start + cols
            x = tl.load(base + c, mask=c < V, other=float("-inf")).to(tl.float32) * inv_t
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
            m = m_new
        lse = m + tl.log(s)
        t = tl.load(t_ptr + row)
        zt = tl.load(base + t).to(tl.float32) * inv_t
        tl.store(logp_ptr + row, zt - lse)
        tl.store(lse_ptr + row, lse)

    @triton.jit
    def _dlogits_kernel(z_ptr, d_ptr, t_ptr, lse_ptr, g_ptr, V, stride, inv_t, BLOCK: tl.constexpr):
        # program (row, column block): d = (onehot(t) − exp(z/T − lse)) · g / T (d may be z itself)
        row = tl.program_id(0).to(tl.int64)
        c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        mask = c < V
        z = tl.load(z_ptr + row * stride + c, mask=mask, other=0.0)
        lse = tl.load(lse_ptr + row)
        g = tl.load(g_ptr + row) * inv_t
        t = tl.load(t_ptr + row)
        p = tl.exp(z.to(tl.float32) * inv_t - lse)
        d = tl.where(c == t, g, 0.0) - p * g
        tl.store(d_ptr + row * stride + c, d.to(z.dtype), mask=mask)


def chunk_stats(z: torch.Tensor, targets: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """z (c, V) logits in any float dtype, targets (c,) → (log π(target) (c,), lse (c,)), float32."""
    if use_triton(z):
        z = z.contiguous()
        c, v = z.shape
        logp = torch.empty(c, dtype=torch.float32, device=z.device)
        lse = torch.empty_like(logp)
        try:
            if c:
                _stats_kernel[(c,)](z, targets.contiguous(), logp, lse, v, z.stride(0), 1.0 / temperature,
                                    BLOCK=min(BLOCK_V, triton.next_power_of_2(v)), num_warps=8)
            return logp, lse
        except Exception as e:  # noqa: BLE001 - compile or launch failure: fall back below
            _give_up(e)
    x = z.float() / temperature  # (c, V)
    lse = torch.logsumexp(x, dim=-1)  # (c,)
    return x.gather(-1, targets[:, None]).squeeze(-1) - lse, lse


def chunk_dlogits_(z: torch.Tensor, lse: torch.Tensor, targets: torch.Tensor, grad: torch.Tensor,
                   temperature: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """z (c, V), lse (c,), targets (c,), grad (c,) d loss / d log π → d loss / d z (c, V) in
    z's dtype, written into ``out`` (same shape and dtype; default: over z itself) and
    returned."""
    out = z if out is None else out
    if use_triton(z) and z.is_contiguous() and out.is_contiguous():
        c, v = z.shape
        try:
            if c:
                block = min(BLOCK_V, triton.next_power_of_2(v))
                _dlogits_kernel[(c, triton.cdiv(v, block))](z, out, targets.contiguous(), lse.float().contiguous(),
                                                            grad.float().contiguous(), v, z.stride(0),
                                                            1.0 / temperature, BLOCK=block, num_warps=4)
            return out
        except Exception as e:  # noqa: BLE001 - compile or launch failure: fall back below
            _give_up(e)
    g = grad[:, None].float()  # (c, 1)
    d = -torch.exp(z.float() / temperature - lse[:, None]) * g  # (c, V)
    d.scatter_add_(-1, targets[:, None], g)
    return out.copy_(d / temperature)
