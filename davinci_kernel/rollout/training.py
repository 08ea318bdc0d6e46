"""Entry points the trainer calls: task groups for a step, and validation results.

Covers: ``collect_groups`` (every task of a training step through the full group — k
selection samples plus the null scheme, n rollouts, T turns, summaries and
verification — run concurrently so a batching backend sees all rollouts at once;
verified skills are staged in the caller's ``Admission``) and ``validate_tasks`` (the
evaluation protocol of ``dvk run`` with skills on: one selection, one rollout, no
summaries; the best turn's result per task). Both are synchronous; ``cfg`` is the full
``Config``. Does not cover: advantages, updates, or committing skills (``rl``).
"""

from __future__ import annotations

import asyncio
from typing import Optional

from ..records import EvalResult, Task, TaskGroup
from .context import Context
from .episodes import best_result
from .group import GroupPlan, run_group


def _context(backend, evaluator, cfg) -> Context:
    return Context(backend, evaluator, cfg.rollout, cfg.reward, cfg.skills)


def collect_groups(tasks: list[Task], backend, store, evaluator, admission, cfg, step: int = 0,
                   ctx: Optional[Context] = None) -> list[TaskGroup]:
    ctx = ctx or _context(backend, evaluator, cfg)
    plan = GroupPlan.training(cfg.rollout)

    async def main() -> list[TaskGroup]:
        return list(await asyncio.gather(*(run_group(ctx, t, plan, store=store, admission=admission, step=step,
                                                     seed=step * 100003 + i) for i, t in enumerate(tasks))))

    return asyncio.run(main())


def validate_tasks(tasks: list[Task], backend, store, evaluator, cfg, step: int = 0) -> list[EvalResult]:
    if not tasks:
        return []
    ctx = _context(backend, evaluator, cfg)
    use_skills = store is not None and cfg.skills.select_mode != "none"
    plan = GroupPlan(k_schemes=1 if use_skills else 0, null_scheme=not use_skills, n_rollouts=1,
                     turns=cfg.rollout.turns, summaries=False)

    async def main() -> list[TaskGroup]:
        return list(await asyncio.gather(*(run_group(ctx, t, plan, store=store if use_skills else None, step=step)
                                           for t in tasks)))

    out = []
    for task, group in zip(tasks, asyncio.run(main())):
        res = best_result(task, group.episodes[0])
        res.task, res.level = task.name, task.level
        out.append(res)
    return out
