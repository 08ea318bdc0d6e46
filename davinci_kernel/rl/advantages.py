"""Advantages for the three agents: TRLOO for the policy, leave-one-out for the selector
and the summarizer, and the function that fills ``Turn.advantage`` for a ``TaskGroup``.

Math (pure tensor functions, shapes in the comments):

- ``turn_returns(rewards, alive, gamma)``: G[i,t] = Σ_{t'≥t, alive} γ^{t'−t} r[i,t'].
- ``trloo(returns, alive)``: per turn, among the rollouts alive at that turn,
  A_i = G_i − mean_{j≠i} G_j (= N/(N−1)·(G_i − mean G)); one alive rollout: A = G.
- ``leave_one_out(rewards)``: r_i − mean_{j≠i} r_j; N = 1 gives r.

Group assembly (``fill_advantages``): the policy group is every rollout of the task
(``group_by="task"``) or of one scheme (``"scheme"``); optional division by mean |A| over
the task's policy turns; selector reward per scheme = mean over its rollouts of the
best-turn reward, LOO across the schemes that have a selection turn, times 0.3; summary
reward = best verification speedup among its verified skills (else 0), LOO across the
summaries, times 0.5. Turn rewards must already be set (``rewards.reward``).

Does not cover: rejection (``rejection.py``) or the loss (``losses.py``).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from ..records import Episode, TaskGroup, Turn


# --------------------------------------------------------------------------- pure math
def turn_returns(rewards: torch.Tensor, alive: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """rewards (N, T), alive (N, T) bool → G (N, T); 0 where not alive."""
    r = rewards.to(torch.float64) * alive.to(torch.float64)  # (N, T)
    n, t_max = r.shape
    g = torch.zeros_like(r)  # (N, T)
    running = torch.zeros(n, dtype=torch.float64)  # (N,)
    for t in range(t_max - 1, -1, -1):
        running = r[:, t] + gamma * running
        g[:, t] = running
    return (g * alive.to(torch.float64)).to(rewards.dtype if rewards.is_floating_point() else torch.float32)


def trloo(returns: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
    """returns (N, T), alive (N, T) bool → A (N, T): per-turn leave-one-out among alive rollouts."""
    a = alive.to(returns.dtype)  # (N, T)
    g = returns * a  # (N, T)
    count = a.sum(dim=0, keepdim=True)  # (1, T) alive rollouts per turn
    total = g.sum(dim=0, keepdim=True)  # (1, T)
    others = (count - 1).clamp(min=1)  # (1, T)
    baseline = (total - g) / others  # (N, T) mean of the other alive rollouts
    adv = torch.where(count > 1, g - baseline, g)  # one alive: A = G
    return adv * a


def leave_one_out(rewards: torch.Tensor) -> torch.Tensor:
    """rewards (N,) → r_i − mean_{j≠i} r_j (N,); N = 1 gives r."""
    n = rewards.shape[0]
    if n <= 1:
        return rewards.clone()
    return rewards - (rewards.sum() - rewards) / (n - 1)


def normalize_mean_abs(adv: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """adv, mask (...) → adv / mean(|adv| over mask); unchanged when that mean is ~0."""
    m = mask.to(adv.dtype)
    denom = (adv.abs() * m).sum() / m.sum().clamp(min=1)
    if denom <= eps:
        return adv
    return adv / denom


# --------------------------------------------------------------------------- groups
def episode_matrix(episodes: Sequence[Episode]) -> tuple[torch.Tensor, torch.Tensor]:
    """Episodes → rewards (N, T) and alive (N, T); a missing reward counts as 0."""
    t_max = max((len(e.turns) for e in episodes), default=0)
    rewards = torch.zeros(len(episodes), t_max, dtype=torch.float64)
    alive = torch.zeros(len(episodes), t_max, dtype=torch.bool)
    for i, ep in enumerate(episodes):
        for t, turn in enumerate(ep.turns):
            rewards[i, t] = float(turn.reward or 0.0)
            alive[i, t] = True
    return rewards, alive


def policy_advantages(episodes: Sequence[Episode], gamma: float = 1.0, group_by: str = "task",
                      normalize: bool = False) -> list[list[float]]:
    """TRLOO advantages per episode and turn (same nesting as ``episodes[i].turns``)."""
    out: list[list[float]] = [[0.0] * len(e.turns) for e in episodes]
    if not episodes:
        return out
    if group_by == "scheme":
        keys = sorted({e.scheme for e in episodes})
        groups = [[i for i, e in enumerate(episodes) if e.scheme == k] for k in keys]
    else:
        groups = [list(range(len(episodes)))]
    rewards, alive = episode_matrix(episodes)
    adv = torch.zeros_like(rewards)  # (N, T)
    for idx in groups:
        ix = torch.tensor(idx)
        adv[ix] = trloo(turn_returns(rewards[ix], alive[ix], gamma), alive[ix])
    if normalize:
        adv = normalize_mean_abs(adv, alive)
    for i, ep in enumerate(episodes):
        for t in range(len(ep.turns)):
            out[i][t] = float(adv[i, t])
    return out


def scheme_rewards(group: TaskGroup) -> dict[int, float]:
    """Scheme index → mean over its rollouts of the best-turn reward."""
    best: dict[int, list[float]] = {}
    for ep in group.episodes:
        rs = ep.rewards
        best.setdefault(ep.scheme, []).append(max(rs) if rs else 0.0)
    return {k: sum(v) / len(v) for k, v in best.items()}


def _verified(v: Turn, min_speedup: float) -> Optional[float]:
    r = v.result
    if r is None or not r.correct or r.speedup is None or r.speedup < min_speedup:
        return None
    return float(r.speedup)


def summary_rewards(group: TaskGroup, min_speedup: float = 1.2,
                    verified: Optional[Callable[[Turn], Optional[float]]] = None) -> list[float]:
    """Per summary turn: best verification speedup among its verified skills, else 0.

    A summary turn that already carries a reward (set by the rollout, which knows the full
    admission rule) keeps it. Otherwise its verifications are the ``group.verifications``
    turns whose ``turn`` equals the summary's sample index ``turn``; a verification counts
    when ``verified(v)`` returns a speedup (default: correct and speedup ≥ ``min_speedup``).
    """
    check = verified or (lambda v: _verified(v, min_speedup))
    out = []
    for s in group.summaries:
        if s.reward is not None:
            out.append(float(s.reward))
            continue
        speeds = [check(v) for v in group.verifications if v.turn == s.turn]
        speeds = [x for x in speeds if x is not None]
        out.append(max(speeds) if speeds else 0.0)
    return out


def fill_advantages(group: TaskGroup, gamma: float = 1.0, group_by: str = "task",
                    normalize: bool = False, selector_scale: float = 0.3,
                    summarizer_scale: float = 0.5, verify_min_speedup: float = 1.2) -> TaskGroup:
    """Set ``Turn.advantage`` on every policy, selection and summary turn of ``group``.

    Selection and summary turns without a reward get the derived reward written into
    ``Turn.reward`` (scheme reward and verification reward respectively).
    """
    pol = policy_advantages(group.episodes, gamma, group_by, normalize)
    for ep, advs in zip(group.episodes, pol):
        for turn, a in zip(ep.turns, advs):
            turn.advantage = a
    if group.selections:
        sr = scheme_rewards(group)
        rs = torch.tensor([sr.get(t.scheme, 0.0) for t in group.selections], dtype=torch.float64)
        adv = leave_one_out(rs) * selector_scale
        for t, r, a in zip(group.selections, rs.tolist(), adv.tolist()):
            t.reward = r
            t.advantage = a
    if group.summaries:
        rs = torch.tensor(summary_rewards(group, verify_min_speedup), dtype=torch.float64)
        adv = leave_one_out(rs) * summarizer_scale
        for t, r, a in zip(group.summaries, rs.tolist(), adv.tolist()):
            t.reward = r
            t.advantage = a
    return group


def fill_rewards(group: TaskGroup, reward_cfg) -> TaskGroup:
    """Set ``Turn.reward`` on policy turns that have none, from their ``EvalResult``."""
    from .rewards import reward

    for ep in group.episodes:
        for turn in ep.turns:
            if turn.reward is None:
                turn.reward = reward(turn.result, reward_cfg)
    return group
