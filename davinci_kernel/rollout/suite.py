"""`dvk run`: every task of a suite through the episode, resumable, with Fast_p per level.

Covers: the evaluation protocol — per task one rollout of up to T turns, with skill
injection (one selection sample from the library, chosen as ``skills.select_mode`` says:
``llm`` = BM25 top-20 reranked by the selection agent, ``bm25`` = the BM25 top skills, no
model call) or without (the null scheme: skills off or ``select=none``; no library is
opened then); the ``last`` and ``best`` turn's result of each task appended to
``results.jsonl``, the size of the library the run started from in ``run.json``, the task
group to ``groups.jsonl`` (a task whose every model call failed gets no result lines, so a
rerun redoes it); tasks already finished in ``--out`` are skipped (group lines of
unfinished ones are dropped first, so no task has two); several tasks
may run at once (``parallel``) so generation and evaluation overlap; Fast_p for
p ∈ {1, 1.2, 1.5, 2} per level at the last and at the best turn, in ``summary.json``.
The library is read, never changed: evaluation does not learn.
Does not cover: training or skill summaries (``rl``; ``optimize`` for one module).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

from ..config import EvalConfig, RewardConfig, RolloutConfig, SkillsConfig, rollout_sections
from ..files import jsonl_text, write_atomic
from ..records import Task
from ..report.fastp import fastp_table, split_broken
from ..rundir import GROUPS_FILE, RESULTS_FILE, SUMMARY_FILE, WHICH, RunDir
from ..tasks import suite_id
from .context import Context
from .episodes import best_result, last_result
from .failures import CallFailures, count
from .group import GroupPlan, run_group
from .session import Session, open_session, sandbox_of, served_model

FASTP_PS = (0.0, 1.0, 1.2, 1.5, 2.0)


@dataclass
class RunSettings:
    model: str
    suite: str = "builtin"
    skills: bool = True
    turns: int = 3
    device: str = "auto"
    workers: Optional[int] = None
    parallel: int = 1
    skills_db: Optional[str] = None
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    select: str = "llm"  # skills.select_mode: llm | bm25 | none
    seed_library: bool = True  # a new, empty library gets the bundled seed skills (False: --no-seed)
    eval_cfg: Optional[EvalConfig] = None  # the evaluator's settings (None: the defaults, on ``device``)
    skills_cfg: SkillsConfig = field(default_factory=SkillsConfig)  # thresholds of selection
    reward: RewardConfig = field(default_factory=RewardConfig)
    allow: tuple = ()  # config fields a rerun into the same folder may change (--allow-config-change)

    def config(self, select: str) -> dict:
        """The config sections this command reads, as run.json records them (a rerun is checked against it)."""
        return rollout_sections(self.eval_cfg or EvalConfig(device=self.device), self.rollout, self.reward,
                                self.skills_cfg, select, self.seed_library)

    @property
    def uses_library(self) -> bool:
        return self.skills and self.select != "none"

    def meta(self, tasks: list[Task]) -> dict:
        totals: dict[str, int] = {}
        for t in tasks:
            totals[str(t.level)] = totals.get(str(t.level), 0) + 1
        return {"kind": "run", "model": self.model, "suite": suite_id(self.suite),
                "skills": "on" if self.skills else "off",
                "select": self.select if self.skills else "none", "turns": self.turns,
                "language": self.rollout.language, "temperature": self.rollout.temperature,
                "max_new_tokens": self.rollout.max_new_tokens, "totals": totals,
                "config": self.config(self.select if self.skills else "none")}


def result_rows(task: Task, group) -> list[dict]:
    ep = group.episodes[0]
    last, best = last_result(task, ep), best_result(task, ep)
    best_i = ep.best_turn if ep.best_turn is not None else len(ep.turns) - 1
    rows = []
    for which, res, turn in (("last", last, len(ep.turns) - 1), ("best", best, best_i)):
        row = res.to_dict()
        row.update(task=task.name, level=task.level, which=which, turn=turn + 1, skills=ep.skills)
        rows.append(row)
    return rows


def summarize_results(rows: list[dict], totals: dict) -> dict:
    """Fast_p at the last and best turn; a broken problem (stage ``problem``) is out of the
    denominator (``run_suite`` names them)."""
    rows, tot, _ = split_broken(rows, {int(k): v for k, v in totals.items()})
    return {which: fastp_table([r for r in rows if r.get("which") == which], FASTP_PS, tot) for which in WHICH}


async def run_tasks(ctx: Context, tasks: list[Task], settings: RunSettings, session: Session,
                    rundir: RunDir, failures: Optional[CallFailures] = None) -> None:
    """Each task's group to groups.jsonl and its result lines to results.jsonl; a task whose every
    model call failed gets no result lines (it is not a result of the model: a rerun redoes it).
    ``failures`` counts the model calls and the failed ones."""
    failures = failures if failures is not None else CallFailures()
    use = settings.uses_library
    plan = GroupPlan(k_schemes=1 if use else 0, null_scheme=not use, n_rollouts=1, turns=settings.turns,
                     summaries=False)
    sem = asyncio.Semaphore(max(1, settings.parallel))

    async def one(task: Task) -> None:
        async with sem:
            group = await run_group(ctx, task, plan, store=session.store if use else None)
            mine = count([group])
            failures.failed, failures.total = failures.failed + mine.failed, failures.total + mine.total
            failures.first = failures.first or mine.first
            rundir.append(GROUPS_FILE, [group.to_dict()])
            if not mine.all_failed:
                rundir.append(RESULTS_FILE, result_rows(task, group))
            ctx.tick("task")

    await asyncio.gather(*(one(t) for t in tasks))


def _drop_unfinished_groups(rundir: RunDir, done: set[str]) -> None:
    """Before a resume: the task groups of tasks without their result lines (an interrupt came
    between the two writes) are removed, so the redone task has one group line, not two."""
    path = rundir.file(GROUPS_FILE)
    if not path.is_file():
        return
    rows = rundir.read_jsonl(GROUPS_FILE)
    keep = [r for r in rows if r.get("task") in done]
    if len(keep) != len(rows):
        write_atomic(path, jsonl_text(keep))


def run_suite(tasks: list[Task], settings: RunSettings, rundir: RunDir,
              progress: Optional[Callable] = None, session_kw: Optional[dict] = None) -> dict:
    """Run the unfinished tasks; return ``{"done", "skipped", "summary", "failures", "broken"}``
    (failures: the ``CallFailures`` of the model calls made now; broken: the tasks whose problem
    itself failed, out of Fast_p's denominator)."""
    failures = CallFailures()
    done = rundir.finished()
    todo = [t for t in tasks if t.name not in done]
    meta = settings.meta(tasks)

    async def main() -> None:
        async with open_session(settings.model, settings.device, settings.workers, settings.skills_db,
                                use_skills=settings.uses_library, seed_library=settings.seed_library,
                                **{"eval_cfg": settings.eval_cfg, **(session_kw or {})}) as session:
            if session.store is not None:  # the library the run starts from (read, never changed)
                meta["library"] = {"db": str(session.store.path), "skills": len(session.store)}
            meta["server_model"] = served_model(session.backend)
            rundir.start(meta, sandbox=sandbox_of(session.evaluator), allow=settings.allow)
            _drop_unfinished_groups(rundir, done)
            skills_cfg = dataclasses.replace(settings.skills_cfg, select_mode=settings.select if settings.skills
                                             else "none", seed_library=settings.seed_library)
            ctx = Context(session.backend, session.evaluator, settings.rollout, settings.reward, skills_cfg,
                          progress=progress)
            await run_tasks(ctx, todo, settings, session, rundir, failures)

    if todo:
        asyncio.run(main())
    else:
        rundir.start(meta, settings.allow)
    names = {t.name for t in tasks}
    rows = [r for r in rundir.read_jsonl(RESULTS_FILE) if r.get("task") in names]
    summary = summarize_results(rows, meta["totals"])
    rundir.write_json(SUMMARY_FILE, summary)
    broken = sorted({r["task"] for r in split_broken(rows)[2]})
    return {"done": len(todo), "skipped": len(tasks) - len(todo), "summary": summary, "failures": failures,
            "broken": broken}
