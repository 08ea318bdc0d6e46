"""Dynamic sampling, as the public release does it: a step trains on task groups whose
policy rewards vary, drawn from prompts oversampled up front.

The unit is the **task group**: one task's selection samples, its k + 1 schemes × n policy
rollouts and its summaries (``records.TaskGroup``), the release's "prompt" and its responses.
A task group has **no reward variance** when the standard deviation (population) of its
rollouts' returns, each rollout's summed turn rewards over every scheme, is at most
``STD_EPS`` (1e-6: equal rewards up to float residue; every rollout failed, or all reached the
same speedup). Such a group is rejected: the policy's TRLOO advantages, taken over the task's
rollouts, are then all but zero at turn 1 (``reward_std``, ``low_variance``).

``collect_step``, with dynamic sampling on (``rl.dynamic_sampling``):

1. oversample up front: collect the step's tasks plus ``ceil((rl.dynamic_oversample − 1) ×
   batch)`` further tasks (``TaskSampler.extra_for``, round 0) in one collection;
2. reject the groups without reward variance;
3. fill the batch from the survivors, the step's own tasks first, in order; survivors beyond
   the batch are not trained on (``dynamic/surplus``); a batch the survivors cannot fill is
   trained short (``dynamic/short``), as in the release.

A fallback of ours, off by default: with ``rl.dynamic_max_factor`` above the oversampling
factor, a short batch is topped up by further rounds (as many tasks as the batch lacks,
divided by the share of groups kept so far: ``refill_count``) until the step has sampled that
many times the batch. Skills staged by every collected group are committed as usual:
admission is decided by execution, not by the group's rewards. Off: one collection of the
step's tasks, every group kept (the counts are still reported).

Metrics (``counts``; sums over the processes): ``dynamic/zero_variance`` groups without reward
variance among all sampled, ``dynamic/dropped`` of those rejected, ``dynamic/oversampled``
groups sampled up front beyond the step's tasks, ``dynamic/resampled`` all groups sampled
beyond the step's tasks (up front and in further rounds), ``dynamic/surplus``,
``dynamic/short``, ``dynamic/rounds`` further rounds, and ``groups/trained``.

Does not cover: rewards, advantages and PRS (``trainer.prepare_group``), or the update.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..records import Task, TaskGroup

#: a task group whose rollout returns have a standard deviation at or below this has no reward variance
STD_EPS = 1e-6


def reward_std(returns: torch.Tensor) -> float:
    """returns (N,): each rollout's summed rewards → their population standard deviation; 0 for N ≤ 1."""
    if returns.numel() <= 1:
        return 0.0
    return float(returns.to(torch.float64).std(unbiased=False))


def rollout_returns(group: TaskGroup) -> torch.Tensor:
    """(N,) each rollout's summed turn rewards (a missing reward counts as 0), over every scheme."""
    return torch.tensor([sum(float(t.reward or 0.0) for t in ep.turns) for ep in group.episodes],
                        dtype=torch.float64)


def low_variance(group: TaskGroup, eps: float = STD_EPS) -> bool:
    """Whether ``group``'s rollout returns (rewards set) vary by at most ``eps``."""
    return reward_std(rollout_returns(group)) <= eps


def refill_count(missing: int, kept: int, sampled: int, budget: int) -> int:
    """Tasks to collect next: ``missing`` places / the share kept so far (``kept`` of
    ``sampled``), at least ``missing``; all of ``budget`` (the groups the bound still allows)
    when none was kept yet; never more than ``budget``."""
    if missing <= 0 or budget <= 0:
        return 0
    share = kept / sampled if sampled and kept else 0.0
    want = math.ceil(missing / share) if share > 0 else missing + budget
    return max(0, min(budget, max(missing, want)))


def oversample_count(batch: int, factor: float) -> int:
    """Tasks collected up front beyond the ``batch``: ceil((factor − 1) · batch), at least 0."""
    return max(0, math.ceil((factor - 1.0) * batch - 1e-9))


@dataclass
class Collected:
    """What one step collected: the groups to train on, every group sampled (for the reward
    metrics), the skills staged by every round, PRS drops and the dynamic/* counts."""

    groups: list[TaskGroup]
    sampled: list[TaskGroup]
    staged: list = field(default_factory=list)
    prs_dropped: int = 0
    counts: dict[str, float] = field(default_factory=dict)


def collect_step(tasks: list[Task], collect: Callable[[list[Task]], list[TaskGroup]],
                 prepare: Callable[[TaskGroup], int], staged: Callable[[], list],
                 extra: Callable[[int, int, set[str]], list[Task]], dynamic: bool = False,
                 oversample: float = 1.0, max_factor: float = 0.0) -> Collected:
    """One step's groups for ``tasks`` (this process's share of the batch).

    ``collect(tasks)`` samples their groups; ``prepare(group)`` sets rewards, advantages and
    PRS in place and returns PRS's drops; ``staged()`` is the environment's staged skills
    after a collection; ``extra(round, n, names_seen)`` gives ``n`` further tasks (round 0:
    the up-front oversampling). ``max_factor`` bounds the groups sampled to that many times the
    batch; at or below ``oversample`` no further round runs."""
    batch = len(tasks)
    limit = math.floor(max(max_factor, oversample) * batch + 1e-9)
    out = Collected(groups=[], sampled=[])
    kept: list[TaskGroup] = []
    zero = rounds = 0
    todo = list(tasks)
    if dynamic:
        n_over = oversample_count(batch, oversample)
        todo += extra(0, n_over, {t.name for t in tasks}) if n_over else []
    over = len(todo) - batch
    while todo:
        groups = collect(todo)
        out.staged += list(staged())
        out.sampled += groups
        out.prs_dropped += sum(prepare(g) for g in groups)
        flat = [low_variance(g) for g in groups]
        zero += flat.count(True)
        kept += [g for g, f in zip(groups, flat) if not f or not dynamic]
        if not dynamic:
            break
        n = refill_count(batch - len(kept), len(kept), len(out.sampled), limit - len(out.sampled))
        if n <= 0:
            break
        rounds += 1
        todo = extra(rounds, n, {g.task for g in out.sampled})
    out.groups = kept[:batch] if dynamic else kept
    out.counts = {
        "dynamic/zero_variance": float(zero),
        "dynamic/dropped": float(zero if dynamic else 0),
        "dynamic/oversampled": float(over),
        "dynamic/resampled": float(len(out.sampled) - batch),
        "dynamic/surplus": float(max(0, len(kept) - batch) if dynamic else 0),
        "dynamic/short": float(max(0, batch - len(kept)) if dynamic else 0),
        "dynamic/rounds": float(rounds),
        "groups/trained": float(len(out.groups)),
    }
    return out
