"""One task group (DESIGN §2): select → roll out → summarize → verify → stage.

Covers: ``GroupPlan`` (how many selection samples, whether the null scheme runs, rollouts
per scheme, turns, whether summaries run) and ``run_group``, which drives the stages for
one task and returns the ``TaskGroup`` record with every model call as a ``Turn``.
Skills that pass verification are staged in the caller's ``Admission``; ``admitted`` lists
the one staged for this task. Does not cover: committing skills, advantages or training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..records import Skill, Task, TaskGroup
from ..skills.admit import Admission
from .context import Context
from .episodes import run_episodes
from .selection import select_schemes
from .summary import pick_trigger, summarize, verify_and_stage


@dataclass
class GroupPlan:
    k_schemes: int = 3
    null_scheme: bool = True
    n_rollouts: int = 4
    turns: int = 3
    summaries: bool = True
    record_usage: bool = False  # count selections in the library (not during evaluation)

    @classmethod
    def training(cls, rcfg) -> GroupPlan:
        return cls(rcfg.k_schemes, True, rcfg.n_rollouts, rcfg.turns, True, True)


async def run_group(ctx: Context, task: Task, plan: GroupPlan, store=None,
                    admission: Optional[Admission] = None, step: int = 0, seed: int = 0) -> TaskGroup:
    schemes, selections = await select_schemes(ctx, task, store, plan.k_schemes if store is not None else 0,
                                               step=None, seed=seed)
    if plan.null_scheme or not schemes:
        schemes.append([])
    group = TaskGroup(task=task.name, schemes=[[s.name for s in sc] for sc in schemes],
                      selections=selections, step=step)
    group.episodes = await run_episodes(ctx, task, schemes, plan.n_rollouts, turns=plan.turns)
    if store is not None and plan.record_usage:
        _record_usage(store, schemes, group)
    if plan.summaries and admission is not None:
        trig = pick_trigger(group.episodes, ctx)
        if trig is not None:
            scheme = schemes[trig.episode.scheme]
            existing = store.names() if store is not None else []
            group.summaries = await summarize(ctx, task, trig, scheme, existing)
            group.verifications = await verify_and_stage(ctx, task, trig, scheme, group.summaries, admission)
            staged = admission.staged.get(task.name)
            group.admitted = [staged[0]] if staged else []
    ctx.tick("group")
    return group


def _record_usage(store, schemes: list[list[Skill]], group: TaskGroup) -> None:
    """Count each scheme's skills once per group; improved = some rollout got faster than turn 1."""
    for si, scheme in enumerate(schemes):
        if not scheme:
            continue
        improved = False
        for ep in group.episodes:
            if ep.scheme != si or ep.best_turn is None:
                continue
            first = ep.turns[0].result
            best = ep.turns[ep.best_turn].result
            improved |= bool(first and first.correct and (best.speedup or 0) > (first.speedup or 0))
        store.record_usage([s.name for s in scheme], improved)
