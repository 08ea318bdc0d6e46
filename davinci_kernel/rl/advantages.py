"""Advantages for the three agents: TRLOO for the policy, leave-one-out for the selector
and the summarizer, and the function that fills ``Turn.advantage`` for a ``TaskGroup``.

Math (pure tensor functions, shapes in the comments):

- ``turn_returns(rewards, alive, gamma)``: G[i,t] = Σ_{t'≥t, alive} γ^{t'−t} r[i,t'].
- ``trloo(returns, alive)``: per turn, among the rollouts alive at that turn,
  A_i = G_i − mean_{j≠i} G_j (= N/(N−1)·(G_i − mean G)); one alive rollout: A = G.
- ``leave_one_out(rewards)``: r_i − mean_{j≠i} r_j; N = 1 gives r.

- ``normalize_mean_abs(adv, weight)``: A / (Σ w·|A| / Σ w), the weighted mean |A|.

Group assembly (``fill_advantages``): the policy group is every rollout of the task
(``group_by="task"``) or of one scheme (``"scheme"``); selection turns: LOO of their
rewards across the schemes that have a selection turn, times 0.3; summary turns: LOO of
their rewards across the summaries, times 0.5. With ``normalize`` (``rl.normalize_adv``, the
release's ``SKILL_ADV_CROSS_SCHEME``) the policy's advantages alone are divided by their mean
|A| over the task's policy turns across all schemes (whatever ``group_by``), token-weighted:
each turn's |A| counts once per token of its completion (``turn_tokens``), so the mean |A|
over the task's policy tokens becomes 1. Selection and summary advantages are not rescaled.

Does not cover: the rewards themselves (``rollout/rewards.py``, which the environment
applies; every turn's reward must be set before ``fill_advantages``), rejection
(``rejection.py``) or the loss (``losses.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

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


def normalize_mean_abs(adv: torch.Tensor, weight: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """adv, weight (...) (a bool mask, or token counts) → adv / (Σ w·|adv| / Σ w); unchanged
    when that mean is ~0."""
    m = weight.to(adv.dtype)
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


def turn_tokens(episodes: Sequence[Episode]) -> torch.Tensor:
    """Episodes → tokens (N, T): each turn's completion tokens, 0 where there is no turn. A
    turn without token ids (a backend that gives text only) makes every turn count 1: the
    weights are then the turns, never a mix of tokens and turns."""
    t_max = max((len(e.turns) for e in episodes), default=0)
    out = torch.zeros(len(episodes), t_max, dtype=torch.float64)
    for i, ep in enumerate(episodes):
        for t, turn in enumerate(ep.turns):
            ids = turn.completion.token_ids if turn.completion is not None else None
            if not ids:
                return episode_matrix(episodes)[1].to(torch.float64)
            out[i, t] = float(len(ids))
    return out


def policy_advantages(episodes: Sequence[Episode], gamma: float = 1.0, group_by: str = "task",
                      normalize: bool = False) -> list[list[float]]:
    """TRLOO advantages per episode and turn (same nesting as ``episodes[i].turns``); with
    ``normalize`` divided by their token-weighted mean |A| over all ``episodes``."""
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
        adv = normalize_mean_abs(adv, turn_tokens(episodes) * alive)  # (N, T), weights (N, T)
    for i, ep in enumerate(episodes):
        for t in range(len(ep.turns)):
            out[i][t] = float(adv[i, t])
    return out


def _leave_one_out_turns(turns: Sequence[Turn], scale: float) -> None:
    """``Turn.advantage`` = scale × leave-one-out of the turns' rewards, which must be set."""
    missing = sum(1 for t in turns if t.reward is None)
    if missing:
        raise ValueError(f"{missing} {turns[0].role} turn(s) without a reward: the environment sets them "
                         "(davinci_kernel.rollout.rewards) before advantages")
    rs = torch.tensor([float(t.reward) for t in turns], dtype=torch.float64)  # (N,)
    adv = leave_one_out(rs)  # (N,)
    for t, a in zip(turns, (adv * scale).tolist()):
        t.advantage = a


def fill_advantages(group: TaskGroup, gamma: float = 1.0, group_by: str = "task",
                    normalize: bool = False, selector_scale: float = 0.3,
                    summarizer_scale: float = 0.5) -> TaskGroup:
    """Set ``Turn.advantage`` on every policy, selection and summary turn of ``group``;
    ``normalize`` divides the policy's by their token-weighted mean |A| over the task."""
    pol = policy_advantages(group.episodes, gamma, group_by, normalize)
    for ep, advs in zip(group.episodes, pol):
        for turn, a in zip(ep.turns, advs):
            turn.advantage = a
    if group.selections:
        _leave_one_out_turns(group.selections, selector_scale)
    if group.summaries:
        _leave_one_out_turns(group.summaries, summarizer_scale)
    return group
