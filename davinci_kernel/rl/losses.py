"""The policy-gradient loss over generated tokens of all three roles.

Covers: token log-probs from logits (chunked) or straight from the output head's hidden
states and weight (fused: no logits tensor), the clipped token-level policy-gradient objective
(PPO-style clip 0.2 / 0.28 for off-policy micro-steps; on-policy the ratio is 1 and it is
plain REINFORCE with the advantage), optional per-token importance weights (TIS),
the aggregation of token losses into one loss (``rl.loss_agg``: ``agg_coefficients``), and
per-role loss / advantage statistics.

Inputs are flat over the kept (generated, unmasked) tokens of a micro-batch: prompts and
environment feedback never reach these functions because the trainer only gathers logits
at completion positions. Does not cover: which tokens those are (``sequences.py``).
"""

from __future__ import annotations

from typing import Optional

import torch

from .logprob_kernels import chunk_dlogits_, chunk_stats, use_triton

ROLES = ("select", "policy", "summary", "verify")
ROLE_ID = {r: i for i, r in enumerate(ROLES)}


CHUNK_ELEMENTS = 1 << 27  # float32 logits worked on at once (512 MiB)


def _row_step(vocab: int, elem_bytes: int = 4) -> int:
    """Rows per chunk: a block of about CHUNK_ELEMENTS float32 logits' bytes. The torch
    softmax math makes float32 copies (4 bytes per logit); the Triton kernels work on the
    block in its own dtype (``elem_bytes``), so a bf16 block holds twice the rows."""
    return max(1, CHUNK_ELEMENTS * 4 // max(1, vocab * elem_bytes))


_OUT_DTYPE_MM = [True]  # torch.addmm(..., out_dtype=float32) works here (CUDA, bf16 / fp16 inputs)


def _add_tmm_(acc: torch.Tensor, d: torch.Tensor, h: torch.Tensor) -> None:
    """acc (V, H) float32 += dᵀ (V, c) @ h (c, H), the product summed in float32 without
    first rounding it to d's dtype (every chunk's rounding would add up over a step)."""
    if d.dtype == torch.float32:
        acc.addmm_(d.t(), h.float())
        return
    if acc.is_cuda and _OUT_DTYPE_MM[0]:
        try:
            torch.addmm(acc, d.t(), h, out_dtype=torch.float32, out=acc)
            return
        except (RuntimeError, TypeError):  # an older torch without the fp32-output matmul
            _OUT_DTYPE_MM[0] = False
    acc.add_((d.t() @ h).float())


class _ChunkedLogProb(torch.autograd.Function):
    """log softmax(logits / T)[target] row chunk by row chunk, in float32.

    Saves only the logits (their own dtype) and one log-sum-exp per row; the backward
    rebuilds softmax chunk by chunk. A float32 copy of (K, V) logits is never whole in
    memory: for K = 8k tokens of a 152k vocabulary that copy alone is 5 GB, and autograd's
    plain version keeps several. On CUDA the softmax math is one Triton pass each way
    (``logprob_kernels``), over the whole block at once."""

    @staticmethod
    def forward(ctx, logits, targets, temperature: float):  # (K, V), (K,) → (K,)
        fast = use_triton(logits)
        step = logits.shape[0] if fast else _row_step(logits.shape[1])
        out = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        lse = torch.empty_like(out)
        for i in range(0, logits.shape[0], step):
            out[i:i + step], lse[i:i + step] = chunk_stats(logits[i:i + step], targets[i:i + step], temperature)
        ctx.save_for_backward(logits, targets, lse)
        ctx.temperature, ctx.step = temperature, step
        return out

    @staticmethod
    def backward(ctx, grad_out):  # (K,) → (K, V)
        logits, targets, lse = ctx.saved_tensors
        t, step = ctx.temperature, ctx.step
        grad = torch.empty_like(logits)
        for i in range(0, logits.shape[0], step):
            sl = slice(i, i + step)
            chunk_dlogits_(logits[sl], lse[sl], targets[sl], grad_out[sl], t, out=grad[sl])
        return grad, None, None


class _FusedLinearLogProb(torch.autograd.Function):
    """log softmax((h @ Wᵀ + b) / T)[target] straight from the hidden states: the output
    head's logits exist only one row chunk at a time, forward and backward (the backward
    recomputes them). Matmuls run in ``compute_dtype`` (the autocast dtype when the caller
    is under autocast), softmax math in float32 (one Triton pass each way on CUDA)."""

    @staticmethod
    def _logits(h, w, b):  # (c, H) @ (V, H)ᵀ (+ b) → (c, V), all in the compute dtype
        x = h @ w.t()
        return x + b if b is not None else x

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature: float, compute_dtype):
        # hidden (K, H), weight (V, H), bias (V,) or None, targets (K,) → (K,)
        fast = use_triton(hidden)
        step = _row_step(weight.shape[0], compute_dtype.itemsize if fast else 4)
        w = weight.to(compute_dtype)
        b = bias.to(compute_dtype) if bias is not None else None
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(out)
        with torch.autocast(hidden.device.type, enabled=False):
            for i in range(0, hidden.shape[0], step):
                sl = slice(i, i + step)
                x = _FusedLinearLogProb._logits(hidden[sl].to(compute_dtype), w, b)
                out[sl], lse[sl] = chunk_stats(x, targets[sl], temperature)
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.temperature, ctx.step, ctx.compute_dtype = temperature, step, compute_dtype
        return out

    @staticmethod
    def backward(ctx, grad_out):  # (K,) → (K, H), (V, H), (V,)
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        t, step, cd = ctx.temperature, ctx.step, ctx.compute_dtype
        w = weight.to(cd)
        b = bias.to(cd) if bias is not None else None
        g_hidden = torch.empty_like(hidden)
        g_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        g_bias = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if bias is not None else None
        with torch.autocast(hidden.device.type, enabled=False):
            for i in range(0, hidden.shape[0], step):
                sl = slice(i, i + step)
                h = hidden[sl].to(cd)  # (c, H)
                z = _FusedLinearLogProb._logits(h, w, b)  # (c, V), recomputed
                d = chunk_dlogits_(z, lse[sl], targets[sl], grad_out[sl], t)  # (c, V), over z
                g_hidden[sl] = (d @ w).to(g_hidden.dtype)  # (c, H)
                _add_tmm_(g_weight, d, h)  # (V, H)
                if g_bias is not None:
                    g_bias += d.float().sum(0)
        return (g_hidden, g_weight.to(weight.dtype), g_bias.to(bias.dtype) if g_bias is not None else None,
                None, None, None)


def linear_logprobs(hidden: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                    targets: torch.Tensor, temperature: float = 1.0,
                    compute_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """hidden (K, H) and an output head (weight (V, H), bias (V,)) → log π(target) (K,) in
    float32, without a (K, V) logits tensor. The matmuls run in ``compute_dtype``; by
    default the autocast dtype when autocast is on here, else the weight's dtype."""
    if compute_dtype is None:
        compute_dtype = autocast_dtype(hidden.device.type) or weight.dtype
    return _FusedLinearLogProb.apply(hidden, weight, bias, targets, float(temperature), compute_dtype)


def autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    """The dtype autocast computes matmuls in right here, or None when it is off."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """logits (..., V), targets (...) → log π(target) (...) in float32, at ``temperature``."""
    v = logits.shape[-1]
    out = _ChunkedLogProb.apply(logits.reshape(-1, v), targets.reshape(-1), float(temperature))  # (K,)
    return out.reshape(targets.shape)  # (...)


def pg_token_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                  clip_low: float = 0.2, clip_high: float = 0.28,
                  weights: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """All (K,) over kept tokens → per-token loss (K,), clipped flag (K,).

    loss_k = −w_k · min(ρ_k A_k, clip(ρ_k, 1−clip_low, 1+clip_high) A_k), ρ = exp(new − old).
    """
    ratio = torch.exp(new_logp - old_logp.detach())  # (K,)
    unclipped = ratio * adv  # (K,)
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv  # (K,)
    loss = -torch.minimum(unclipped, clipped)  # (K,)
    if weights is not None:
        loss = loss * weights.detach()
    was_clipped = (clipped < unclipped).detach()  # (K,) the clip was active
    return loss, was_clipped


#: how token losses become one loss (``rl.loss_agg``); the release uses "seq-mean-token-sum"
LOSS_AGGS = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")


def agg_coefficients(seq_tokens: torch.Tensor, mode: str, n_tokens: float, n_seqs: float,
                     scale: float = 1.0) -> torch.Tensor:
    """seq_tokens (K,): for each kept token, the token count of its sequence → c (K,) such
    that loss = Σ_k c_k ℓ_k over the whole (mini-)batch, ``n_tokens`` tokens in ``n_seqs``
    sequences (summed over its micro-batches and processes, so that their parts add up):

    - ``token-mean``: c = 1 / n_tokens (every token weighs the same);
    - ``seq-mean-token-sum``: c = 1 / (n_seqs · scale): each sequence's token sum, averaged
      over the sequences, divided by ``scale`` (the release: 1000). Every token weighs the
      same here too; against token-mean the loss differs by mean length / scale per batch;
    - ``seq-mean-token-mean``: c = 1 / (n_seqs · len(sequence)): every sequence weighs the
      same, its tokens share that weight.
    """
    if mode == "token-mean":
        return torch.full(seq_tokens.shape, 1.0 / max(float(n_tokens), 1.0))  # (K,)
    if mode == "seq-mean-token-sum":
        return torch.full(seq_tokens.shape, 1.0 / (max(float(n_seqs), 1.0) * float(scale)))  # (K,)
    if mode == "seq-mean-token-mean":
        return 1.0 / (max(float(n_seqs), 1.0) * seq_tokens.clamp(min=1).to(torch.float32))  # (K,)
    raise ValueError(f"loss aggregation {mode!r}: allowed values are {', '.join(LOSS_AGGS)}")


def aggregate(per_token: torch.Tensor, coef: torch.Tensor) -> torch.Tensor:
    """per_token (K,), coef (K,) (``agg_coefficients``) → Σ c_k ℓ_k, this micro-batch's part."""
    return (per_token * coef).sum()


class RoleStats:
    """Running sums of loss, advantage, |advantage|, clip hits and tokens per role."""

    def __init__(self) -> None:
        self.sums = torch.zeros(len(ROLES), 5, dtype=torch.float64)  # loss, adv, |adv|, clipped, tokens

    def add(self, loss: torch.Tensor, adv: torch.Tensor, clipped: torch.Tensor, role: torch.Tensor,
            keep: Optional[torch.Tensor] = None) -> None:
        """All (K,); role holds ``ROLE_ID`` values; ``keep`` (K,) bool leaves tokens out.

        Sums stay on the device of the inputs (no host sync per micro-batch); ``summary``
        reads them once."""
        m = torch.ones_like(adv, dtype=torch.float64) if keep is None else keep.double()  # (K,)
        a = adv.double()
        vals = torch.stack([loss.detach().double() * m, a * m, a.abs() * m, clipped.double() * m, m], dim=-1)  # (K, 5)
        if self.sums.device != vals.device:
            self.sums = self.sums.to(vals.device)
        self.sums.index_add_(0, role.long().to(vals.device), vals)

    def summary(self, sums: Optional[torch.Tensor] = None) -> dict[str, float]:
        s = (self.sums if sums is None else sums).double().cpu()
        out: dict[str, float] = {}
        for i, role in enumerate(ROLES):
            n = float(s[i, 4])
            if n == 0:
                continue
            out[f"loss/{role}"] = float(s[i, 0]) / n
            out[f"adv_mean/{role}"] = float(s[i, 1]) / n
            out[f"adv_abs/{role}"] = float(s[i, 2]) / n
            out[f"clip_frac/{role}"] = float(s[i, 3]) / n
            out[f"tokens/{role}"] = n
        return out
