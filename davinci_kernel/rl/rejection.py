"""Which samples enter the update, and with what importance weight.

Covers:
- profiling-based rejection sampling (PRS): a correct policy turn is kept with
  probability clamp((coverage − 0.3) / 0.1, 0, 1); incorrect turns are always kept; a
  turn without a coverage measurement (CPU mode) is kept;
- mismatch rejection for completions whose log-probs came from another engine (a vLLM /
  SGLang server): drop a sequence whose geometric-mean trainer/rollout probability ratio
  leaves [0.999, 1.001], or whose smallest per-token ratio is below 1e-4;
- truncated importance sampling (TIS) weights min(π_trainer / π_rollout, cap) per token.

Does not cover: computing the log-probs (``losses.py`` / ``trainer.py``).
"""

from __future__ import annotations

import random
from typing import Iterable, Optional

import torch

from ..records import Turn

PRS_LOW = 0.3
PRS_WIDTH = 0.1
GEO_LOW, GEO_HIGH = 0.999, 1.001
MIN_TOKEN_RATIO = 1e-4


def prs_keep_prob(correct: bool, coverage: Optional[float]) -> float:
    """Probability that PRS keeps a policy turn."""
    if not correct or coverage is None:
        return 1.0
    return min(max((float(coverage) - PRS_LOW) / PRS_WIDTH, 0.0), 1.0)


def apply_prs(turns: Iterable[Turn], rng: random.Random) -> int:
    """Set ``kept=False`` on policy turns PRS drops; returns how many were dropped."""
    dropped = 0
    for t in turns:
        r = t.result
        p = prs_keep_prob(bool(r is not None and r.correct), None if r is None else r.coverage)
        if p < 1.0 and rng.random() >= p:
            t.kept = False
            dropped += 1
    return dropped


def mismatch_stats(trainer_logp: torch.Tensor, rollout_logp: torch.Tensor,
                   mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """trainer_logp, rollout_logp, mask (B, L) → geometric-mean ratio (B,), min token ratio (B,)."""
    m = mask.to(trainer_logp.dtype)
    diff = (trainer_logp - rollout_logp) * m  # (B, L) log ratio
    n = m.sum(dim=-1).clamp(min=1)  # (B,)
    geo = torch.exp(diff.sum(dim=-1) / n)  # (B,)
    min_ratio = torch.exp(torch.where(mask.bool(), diff, torch.full_like(diff, float("inf"))).amin(dim=-1))
    return geo, min_ratio  # (B,), (B,)


def mismatch_keep(trainer_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor,
                  low: float = GEO_LOW, high: float = GEO_HIGH,
                  min_token_ratio: float = MIN_TOKEN_RATIO) -> torch.Tensor:
    """(B, L) inputs → keep (B,) bool: geometric ratio inside [low, high] and no token ratio < min."""
    geo, min_ratio = mismatch_stats(trainer_logp, rollout_logp, mask)
    return (geo >= low) & (geo <= high) & (min_ratio >= min_token_ratio)


def tis_weights(trainer_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor,
                cap: float = 2.0) -> torch.Tensor:
    """(B, L) → per-token weights min(exp(trainer − rollout), cap), 0 outside the mask."""
    w = torch.exp(trainer_logp - rollout_logp).clamp(max=cap)
    return w * mask.to(w.dtype)


def segment_mismatch_keep(log_ratio: torch.Tensor, valid: torch.Tensor, seg: torch.Tensor, n: int,
                          low: float = GEO_LOW, high: float = GEO_HIGH,
                          min_token_ratio: float = MIN_TOKEN_RATIO) -> torch.Tensor:
    """Flat form of ``mismatch_keep`` for packed rows.

    log_ratio, valid, seg (K,): trainer − rollout log-prob, whether the rollout gave one,
    and the sample each token belongs to → keep (n,) bool. Samples without rollout
    log-probs are kept (nothing to compare).
    """
    v = valid.to(log_ratio.dtype)
    lr = torch.where(valid, log_ratio, torch.zeros_like(log_ratio))
    sums = torch.zeros(n, dtype=log_ratio.dtype).index_add_(0, seg, lr * v)  # (n,)
    cnt = torch.zeros(n, dtype=log_ratio.dtype).index_add_(0, seg, v)  # (n,)
    mins = torch.full((n,), float("inf"), dtype=log_ratio.dtype).scatter_reduce_(
        0, seg, torch.where(valid, log_ratio, torch.full_like(log_ratio, float("inf"))), "amin")  # (n,)
    geo = torch.exp(sums / cnt.clamp(min=1))
    ok = (geo >= low) & (geo <= high) & (torch.exp(mins) >= min_token_ratio)
    return ok | (cnt == 0)
