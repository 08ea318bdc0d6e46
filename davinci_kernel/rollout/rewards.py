"""The rewards of the three roles: facts about the environment, one rule per role.

- policy (``policy_reward``): a pure function of one turn's ``EvalResult``, by
  ``RewardConfig.kind`` (default ``released``; each kind is declared once, with its function
  and help, in ``davinci_kernel/reward_kinds.py``):

  - ``released``: the recipe of the public release,
    ``0.5·correct + 0.5·min(speedup, cap) + w·coverage·correct`` with cap 6, w 0.5;
    every failure (no compile, wrong, flagged) gives 0.
  - ``tiered``: the tiered alternative shipped with the release: ≥3×: 1.0, ≥2×: 0.8,
    ≥1.5×: 0.6, ≥1.2×: 0.4, ≥1×: 0.2, correct but slower: −0.1, compile failure: −0.5,
    incorrect: −0.3, decoy / any reward-hacking flag: −1.
  - ``fastp``: the paper's description of rewards from the Fast_p thresholds: the share of
    the thresholds {0} ∪ ``fastp_thresholds`` the candidate clears, where p = 0 means
    "correct" and p > 0 means "correct and speedup > p" (so the value lies in [0, 1]).

  A turn without a result (no code parsed, or a failed generation) counts as a static
  ``no_code`` failure. Timing unavailable (CPU mode, ``speedup is None``): the speed terms
  are unknown, not zero evidence of slowness. ``released`` then drops the speedup term
  and, when coverage is None too, the coverage term, leaving ``0.5·correct (+ w·coverage)``;
  ``tiered`` gives a correct untimed candidate the parity tier (0.2); ``fastp`` counts only
  the p = 0 threshold. Rewards therefore still rank correct above incorrect, and advantages
  (which subtract a group baseline) are unaffected by the missing constant.
- selection (``scheme_rewards``): a scheme's reward is the mean over its rollouts of the
  best-turn policy reward; every selection turn gets the reward of its scheme.
- summary (``summary_reward``): the best verification speedup among the skills a summary
  proposed that passed verification, else 0. Whoever verifies sets it (``summary.py``,
  the synthetic environment): only it knows the full admission rule.

``fill_rewards`` completes a task group before its advantages: policy turns the rollout
left without a reward (failed generations, environments that score later) and the
selection turns. Does not cover: advantages (``rl/advantages.py``), the verification
itself (``skills/admit.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from ..config import RewardConfig
from ..records import ErrorKind, EvalResult, Stage, TaskGroup
from ..reward_kinds import (  # noqa: F401  (the reward functions, declared once in reward_kinds)
    REWARDS,
    TIER_COMPILE_FAIL,
    TIER_FLAGGED,
    TIER_INCORRECT,
    TIER_SLOWER,
    TIERS,
    fastp_reward,
    released_reward,
    tiered_reward,
)


def policy_reward(result: Optional[EvalResult], cfg: RewardConfig) -> float:
    """Dispatch on ``cfg.kind`` (a ``RewardConfig``). A missing result (no code parsed) is a failure."""
    if result is None:
        result = EvalResult(compiled=False, correct=False, stage=Stage.STATIC, error_kind=ErrorKind.NO_CODE)
    kind = REWARDS.get(cfg.kind)
    if kind is None:
        raise ValueError(f"reward.kind={cfg.kind!r}: allowed values are {', '.join(REWARDS)}")
    return kind.fn(result, cfg)


def scheme_rewards(group: TaskGroup) -> dict[int, float]:
    """Scheme index → mean over its rollouts of the best-turn reward (a missing reward counts as 0)."""
    best: dict[int, list[float]] = {}
    for ep in group.episodes:
        rs = ep.rewards
        best.setdefault(ep.scheme, []).append(max(rs) if rs else 0.0)
    return {k: sum(v) / len(v) for k, v in best.items()}


def summary_reward(verified_speedups: Iterable[float]) -> float:
    """The best speedup among a summary's skills that passed verification; 0 when none did."""
    return max((float(s) for s in verified_speedups), default=0.0)


def fill_rewards(group: TaskGroup, cfg: RewardConfig) -> TaskGroup:
    """In place: ``policy_reward`` on policy turns without a reward, then every selection
    turn's scheme reward (``scheme_rewards``; 0 for a scheme without rollouts). Summary
    turns keep the reward their verification set."""
    for ep in group.episodes:
        for turn in ep.turns:
            if turn.reward is None:
                turn.reward = policy_reward(turn.result, cfg)
    sr = scheme_rewards(group)
    for turn in group.selections:
        turn.reward = sr.get(turn.scheme, 0.0)
    return group
