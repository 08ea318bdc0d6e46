"""Per-turn rewards: pure functions of one ``EvalResult``.

Covers the three reward recipes of daVinci-kernel and a ``reward(result, cfg)``
dispatch on ``RewardConfig.kind`` (default ``released``, named in the config):

- ``released``: the recipe of the public release,
  ``0.5·correct + 0.5·min(speedup, cap) + w·coverage·correct`` with cap 6, w 0.5;
  every failure (no compile, wrong, flagged) gives 0.
- ``tiered``: the tiered alternative shipped with the release: ≥3×: 1.0, ≥2×: 0.8,
  ≥1.5×: 0.6, ≥1.2×: 0.4, ≥1×: 0.2, correct but slower: −0.1, compile failure: −0.5,
  incorrect: −0.3, decoy / any reward-hacking flag: −1.
- ``fastp``: the paper's description of rewards from the Fast_p thresholds: the share of
  the thresholds {0} ∪ ``fastp_thresholds`` the candidate clears, where p = 0 means
  "correct" and p > 0 means "correct and speedup > p" (so the value lies in [0, 1]).

Timing unavailable (CPU mode, ``speedup is None``): the speed terms are unknown, not
zero evidence of slowness. ``released`` then drops the speedup term and, when coverage is
None too, the coverage term, leaving ``0.5·correct (+ w·coverage)``; ``tiered`` gives a
correct untimed candidate the parity tier (0.2); ``fastp`` counts only the p = 0
threshold. Rewards therefore still rank correct above incorrect, and advantages (which
subtract a group baseline) are unaffected by the missing constant.

Does not cover: advantages (``advantages.py``) or rejection (``rejection.py``).
"""

from __future__ import annotations

import math
from typing import Optional

from ..records import EvalResult

TIERS = ((3.0, 1.0), (2.0, 0.8), (1.5, 0.6), (1.2, 0.4), (1.0, 0.2))
TIER_SLOWER = -0.1
TIER_COMPILE_FAIL = -0.5
TIER_INCORRECT = -0.3
TIER_FLAGGED = -1.0


def _speedup(result: EvalResult) -> Optional[float]:
    s = result.speedup
    if s is None or not isinstance(s, (int, float)) or not math.isfinite(s) or s < 0:
        return None
    return float(s)


def released_reward(result: EvalResult, cap: float = 6.0, coverage_weight: float = 0.5) -> float:
    """Released recipe: 0.5·correct + 0.5·min(speedup, cap) + w·coverage·correct; failures 0."""
    if not result.correct or result.flags:
        return 0.0
    r = 0.5
    s = _speedup(result)
    if s is not None:
        r += 0.5 * min(s, cap)
    if result.coverage is not None:
        r += coverage_weight * min(max(float(result.coverage), 0.0), 1.0)
    return r


def tiered_reward(result: EvalResult) -> float:
    """Tiered alternative of the release (see module docstring for the table)."""
    if result.flags:
        return TIER_FLAGGED
    if not result.compiled:
        return TIER_COMPILE_FAIL
    if not result.correct:
        return TIER_INCORRECT
    s = _speedup(result)
    if s is None:
        return TIERS[-1][1]
    for threshold, value in TIERS:
        if s >= threshold:
            return value
    return TIER_SLOWER


def fastp_reward(result: EvalResult, thresholds=(1.0, 1.2, 1.5, 2.0)) -> float:
    """Share of the Fast_p thresholds {0} ∪ thresholds that the candidate clears."""
    if not result.correct or result.flags:
        return 0.0
    s = _speedup(result)
    hits = 1 + sum(1 for p in thresholds if s is not None and s > p)
    return hits / (1 + len(thresholds))


def reward(result: Optional[EvalResult], cfg) -> float:
    """Dispatch on ``cfg.kind`` (a ``RewardConfig``). A missing result (no code parsed) is a failure."""
    if result is None:
        result = EvalResult(compiled=False, correct=False, stage="static", error_kind="no_code")
    if cfg.kind == "released":
        return released_reward(result, cfg.speedup_cap, cfg.coverage_weight)
    if cfg.kind == "tiered":
        return tiered_reward(result)
    if cfg.kind == "fastp":
        return fastp_reward(result, tuple(cfg.fastp_thresholds))
    raise ValueError(f"reward.kind={cfg.kind!r}: allowed values are released, tiered, fastp")
