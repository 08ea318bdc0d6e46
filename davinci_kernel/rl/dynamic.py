"""Dynamic sampling (as in DAPO): a step trains on task groups that carry a learning signal.

The unit is the **task group**: one task's selection samples, its k + 1 schemes × n policy
rollouts and its summaries (``records.TaskGroup``). It is the unit the environment samples,
and the widest group any advantage is taken over (TRLOO over the task's rollouts, or over one
scheme's with ``rl.group_by=scheme``; leave-one-out over the task's schemes and over its
summaries). A task group **has no signal** when no turn of any role has a non-zero advantage
(beyond float residue, ``SIGNAL_EPS``; after ``rl.joint_training`` is applied): its rewards are equal within every group its
advantages are taken over (every rollout failed, or all reached the same speedup), and it
would add no sample to the update. Within a task group that has a signal, a scheme whose own
rollouts are all equal already gives no samples (advantage 0 is never packed), so nothing
finer is dropped.

``collect_step``, with dynamic sampling on (``rl.dynamic_sampling``): collect the step's
tasks; drop the groups with no signal; while fewer than the batch remain and the bound
(``rl.dynamic_max_factor`` × the batch, in groups sampled) allows, collect further tasks
(``TaskSampler.extra_for``), as many as the batch lacks divided by the share of groups kept so
far (``refill_count``); groups with a signal beyond the batch are not trained on (the first
ones are kept). Skills staged by every collected group are committed as usual: admission is
decided by execution, not by the group's signal. Off: one collection, every group kept (the
counts are still reported).

Metrics (``counts``; sums over the processes): ``dynamic/zero_variance`` groups with no
signal among all sampled, ``dynamic/dropped`` of those dropped, ``dynamic/resampled`` groups
sampled beyond the step's tasks, ``dynamic/surplus`` groups with a signal beyond the batch,
``dynamic/short`` places of the batch left unfilled at the bound, ``dynamic/rounds`` further
collections, and ``groups/trained``.

Does not cover: rewards, advantages and PRS (``trainer.prepare_group``), or the update.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from ..records import Task, TaskGroup
from .sequences import group_turns

#: |advantage| at or below this is zero: leave-one-out of equal rewards leaves float residue (~1e-17)
SIGNAL_EPS = 1e-9


def has_signal(group: TaskGroup, eps: float = SIGNAL_EPS) -> bool:
    """Whether any turn of ``group`` (every role) has an advantage beyond ±``eps``; advantages set."""
    return any(t.advantage is not None and abs(t.advantage) > eps for t in group_turns(group))


def refill_count(missing: int, kept: int, sampled: int, budget: int) -> int:
    """Tasks to collect next: ``missing`` places / the share kept so far (``kept`` of
    ``sampled``), at least ``missing``; all of ``budget`` (the groups the bound still allows)
    when none was kept yet; never more than ``budget``."""
    if missing <= 0 or budget <= 0:
        return 0
    share = kept / sampled if sampled and kept else 0.0
    want = math.ceil(missing / share) if share > 0 else missing + budget
    return max(0, min(budget, max(missing, want)))


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
                 max_factor: float = 1.0) -> Collected:
    """One step's groups for ``tasks`` (this process's share of the batch).

    ``collect(tasks)`` samples their groups; ``prepare(group)`` sets rewards, advantages and
    PRS in place and returns PRS's drops; ``staged()`` is the environment's staged skills
    after a collection; ``extra(round, n, names_seen)`` gives ``n`` further tasks."""
    batch = len(tasks)
    limit = math.floor(max_factor * batch + 1e-9)
    out = Collected(groups=[], sampled=[])
    kept: list[TaskGroup] = []
    zero = rounds = 0
    todo = list(tasks)
    while todo:
        groups = collect(todo)
        out.staged += list(staged())
        out.sampled += groups
        out.prs_dropped += sum(prepare(g) for g in groups)
        signal = [has_signal(g) for g in groups]
        zero += signal.count(False)
        kept += [g for g, s in zip(groups, signal) if s or not dynamic]
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
        "dynamic/resampled": float(len(out.sampled) - batch),
        "dynamic/surplus": float(max(0, len(kept) - batch) if dynamic else 0),
        "dynamic/short": float(max(0, batch - len(kept)) if dynamic else 0),
        "dynamic/rounds": float(rounds),
        "groups/trained": float(len(out.groups)),
    }
    return out
