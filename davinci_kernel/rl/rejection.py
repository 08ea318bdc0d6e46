"""Which samples enter the update, and with what importance weight.

Covers:
- profiling-based rejection sampling (PRS): a correct policy turn is kept with
  probability clamp((coverage − 0.3) / 0.1, 0, 1); incorrect turns are always kept; a
  turn without a coverage measurement (CPU mode) is kept;
- mismatch rejection for completions whose log-probs came from another engine (a vLLM /
  SGLang server): drop a sequence whose geometric-mean trainer/rollout probability ratio
  leaves [0.999, 1.001], or whose smallest per-token ratio is below 1e-4;
- truncated importance sampling (TIS) weights min(π_trainer / π_rollout, cap) per token.

Both mismatch rules take the flat per-token tensors of an update row (``update.py``).
Does not cover: computing the log-probs (``losses.py`` / ``update.py``).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Optional

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


def tis_weights(trainer_logp: torch.Tensor, rollout_logp: torch.Tensor, cap: float = 2.0) -> torch.Tensor:
    """trainer_logp, rollout_logp (K,), the latter NaN where the rollout gave none →
    per-token weights (K,): min(exp(trainer − rollout), cap), 1 without a rollout log-prob."""
    valid = ~torch.isnan(rollout_logp)  # (K,)
    ratio = torch.exp(trainer_logp - torch.nan_to_num(rollout_logp)).clamp(max=cap)  # (K,)
    return torch.where(valid, ratio, torch.ones_like(ratio))


def segment_mismatch_keep(log_ratio: torch.Tensor, valid: torch.Tensor, seg: torch.Tensor, n: int,
                          low: float = GEO_LOW, high: float = GEO_HIGH,
                          min_token_ratio: float = MIN_TOKEN_RATIO) -> torch.Tensor:
    """Mismatch rejection per sample of a row.

    log_ratio, valid, seg (K,): trainer − rollout log-prob, whether the rollout gave one,
    and the sample each token belongs to → keep (n,) bool: the sample's geometric-mean
    ratio lies in [low, high] and none of its token ratios is below ``min_token_ratio``.
    Samples without rollout log-probs are kept (nothing to compare).
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
