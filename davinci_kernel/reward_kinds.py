"""The policy reward kinds, each declared once: its name, its function and its help.

Covers: ``REWARDS`` (name → ``RewardKind``), filled by ``@declare(name, help)`` on a pure
function ``(EvalResult, reward settings) -> float``, and the three kinds shipped:
``released``, ``tiered`` and ``fastp`` (their rules: ``rollout/rewards.py``'s docstring).
Everything that lists or picks a reward reads this table: ``RewardConfig.kind``'s choices and
help (and so ``reward.kind=`` on every command, the generated configuration reference),
``rollout.rewards.policy_reward``, and the TRL/verl adapters (``integrations/``). To add a
reward: one decorated function here. Imports only ``records``, so ``config`` can read it.
Does not cover: the selection and summary rewards (``rollout/rewards.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from .records import EvalResult


@dataclass(frozen=True)
class RewardKind:
    name: str
    help: str  # one clause for RewardConfig.kind's help: what it rewards, [R] release / [P] paper
    fn: Callable[[EvalResult, Any], float]  # (result, RewardConfig-like settings) -> reward


REWARDS: dict[str, RewardKind] = {}


def declare(name: str, help: str) -> Callable:
    """Register ``fn(result, settings) -> float`` as the reward kind ``name``."""
    def wrap(fn: Callable[[EvalResult, Any], float]) -> Callable:
        REWARDS[name] = RewardKind(name, help, fn)
        return fn
    return wrap


def kinds_help() -> str:
    """The help of ``reward.kind``: every declared kind with its help."""
    return "reward function: " + "; ".join(f"{k.name} = {k.help}" for k in REWARDS.values())


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


@declare("released", "the public release's recipe (the default) [R]")
def _released(result: EvalResult, cfg: Any) -> float:
    return released_reward(result, cfg.speedup_cap, cfg.coverage_weight)


@declare("tiered", "the release's alternative [R]")
def _tiered(result: EvalResult, cfg: Any) -> float:
    return tiered_reward(result)


@declare("fastp", "from Fast_p thresholds, as the paper describes [P]")
def _fastp(result: EvalResult, cfg: Any) -> float:
    return fastp_reward(result, tuple(cfg.fastp_thresholds))
