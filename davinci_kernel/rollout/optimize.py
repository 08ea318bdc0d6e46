"""`dvk optimize`: the agent loop on one module of the user's, in KernelBench format.

Covers: one task group on the problem file (k selection samples plus the null scheme
when skills are on, the default, n rollouts, T turns, summaries and verification; with
skills off the policy agent alone; ``select`` as ``skills.select_mode``: ``bm25`` takes the
BM25 top skills for each scheme without asking the model, ``none`` runs the null scheme
alone while summaries still grow the library), committing a
verified new skill to the library, and writing ``RUN_DIR/best.py`` (the best candidate:
correct and fastest; else the one that got furthest), ``best.json`` (its EvalResult),
``groups.jsonl`` (every model call), ``results.jsonl`` and ``skills.jsonl`` (newly
admitted skills). A rerun into the same ``--out`` resumes: a task group already in
``groups.jsonl`` is not run again (its outputs are rewritten from it, never appended twice),
unless every model call in it failed (then it is run again).
Does not cover: suites (``suite``) or training.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

from ..config import EvalConfig, RewardConfig, RolloutConfig, SkillsConfig, rollout_sections
from ..files import replace_jsonl_row
from ..records import EvalResult, Stage, Task, TaskGroup
from ..rundir import BEST_CODE, BEST_RESULT, GROUPS_FILE, RESULTS_FILE, SKILLS_FILE, RunDir
from ..skills.admit import Admission
from .context import Context
from .failures import count
from .group import GroupPlan, run_group
from .session import open_session, sandbox_of, served_model


@dataclass
class OptimizeSettings:
    model: str
    device: str = "auto"
    workers: Optional[int] = None
    skills: bool = True  # selection, summaries and admission on the library (False: the policy agent alone)
    skills_db: Optional[str] = None  # the library; None: the default (SkillsConfig().db)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    seed_library: bool = True  # a new, empty library gets the bundled seed skills (False: --no-seed)
    select: str = "llm"  # skills.select_mode: llm | bm25 | none (with skills on)
    eval_cfg: Optional[EvalConfig] = None  # the evaluator's settings (None: the defaults, on ``device``)
    skills_cfg: SkillsConfig = field(default_factory=SkillsConfig)  # thresholds of selection and admission
    reward: RewardConfig = field(default_factory=RewardConfig)
    allow: tuple = ()  # config fields a rerun into the same folder may change (--allow-config-change)

    def config(self, select: str) -> dict:
        """The config sections this command reads, as run.json records them (a rerun is checked against it)."""
        return rollout_sections(self.eval_cfg or EvalConfig(device=self.device), self.rollout, self.reward,
                                self.skills_cfg, select, self.seed_library)


def _rank(res: Optional[EvalResult]) -> tuple:
    """Correct, then compiled, then how far it got (``Stage.ORDER``), then speedup."""
    if res is None:
        return (0, 0, -1, 0.0)
    stage = Stage.ORDER.index(res.stage) if res.stage in Stage.ORDER else 0
    return (int(res.correct), int(res.compiled), stage, res.speedup or 0.0)


def best_candidate(group: TaskGroup) -> tuple[Optional[str], Optional[EvalResult], Optional[tuple[int, int, int]]]:
    """(code, result, (scheme, rollout, turn)) of the best policy turn of the group."""
    best = (None, None, None)
    best_rank = None
    for ep in group.episodes:
        for t in ep.turns:
            if not t.parsed:
                continue
            r = _rank(t.result)
            if best_rank is None or r > best_rank:
                best_rank, best = r, (t.parsed, t.result, (ep.scheme, ep.rollout, t.turn))
    return best


def optimize(task: Task, settings: OptimizeSettings, rundir: RunDir, progress: Optional[Callable] = None,
             session_kw: Optional[dict] = None) -> dict:
    rc = settings.rollout
    use_skills = settings.skills
    meta = {"kind": "optimize", "model": settings.model, "problem": task.path or task.name,
            "turns": rc.turns, "skills": "on" if use_skills else "off",
            "select": settings.select if use_skills else "none",
            "db": (settings.skills_db or SkillsConfig().db) if use_skills else None, "k_schemes": rc.k_schemes,
            "n_rollouts": rc.n_rollouts, "language": rc.language, "totals": {str(task.level): 1},
            "config": settings.config(settings.select if use_skills else "none")}
    selects = use_skills and settings.select != "none"
    plan = GroupPlan(k_schemes=rc.k_schemes if selects else 0, null_scheme=True, n_rollouts=rc.n_rollouts,
                     turns=rc.turns, summaries=use_skills, record_usage=use_skills)

    async def main() -> tuple[TaskGroup, list]:
        async with open_session(settings.model, settings.device, settings.workers, settings.skills_db,
                                use_skills=use_skills, seed_library=settings.seed_library,
                                **{"eval_cfg": settings.eval_cfg, **(session_kw or {})}) as s:
            meta["server_model"] = served_model(s.backend)
            rundir.start(meta, sandbox=sandbox_of(s.evaluator), allow=settings.allow)
            skills_cfg = dataclasses.replace(settings.skills_cfg, select_mode=settings.select if use_skills else "none",
                                             seed_library=settings.seed_library)
            ctx = Context(s.backend, s.evaluator, rc, settings.reward, skills_cfg, progress=progress)
            adm = Admission()
            group = await run_group(ctx, task, plan, store=s.store, admission=adm)
            written = adm.commit(s.store, step=s.store.current_step() + 1) if s.store is not None and adm.staged else []
            return group, written

    saved = _saved_group(task, rundir)
    if saved is not None:  # a rerun of a finished (or nearly finished) run: nothing is redone
        rundir.start(meta, settings.allow)
        group, written = saved, []
    else:
        group, written = asyncio.run(main())
    code, result, where = best_candidate(group)
    _write_outputs(task, rundir, group, code, result, where, written)
    return {"group": group, "best_code": code, "best": result, "where": where, "admitted": written,
            "resumed": saved is not None, "failures": count([] if saved is not None else [group])}


def _saved_group(task: Task, rundir: RunDir) -> Optional[TaskGroup]:
    """The task group an earlier run of this command saved in ``groups.jsonl`` (None if none)."""
    for row in rundir.read_jsonl(GROUPS_FILE):
        if row.get("task") == task.name:
            group = TaskGroup.from_dict(row)
            return None if count([group]).all_failed else group  # no model answered: run it again
    return None


def _write_outputs(task: Task, rundir: RunDir, group: TaskGroup, code, result, where, written: list) -> None:
    """groups.jsonl first (what a rerun resumes from), then best.py, best.json and the result
    line; each keyed by task (or skill name) and replaced, never appended twice."""
    replace_jsonl_row(rundir.file(GROUPS_FILE), "task", group.to_dict())
    if code is not None:
        rundir.write_atomic(BEST_CODE, code)
        rundir.write_json(BEST_RESULT, {**(result.to_dict() if result else {}), "task": task.name,
                                        "level": task.level, "where": where})
    if result is not None:
        replace_jsonl_row(rundir.file(RESULTS_FILE), "task",
                          {**result.to_dict(), "task": task.name, "level": task.level, "which": "best"})
    for s in written:
        replace_jsonl_row(rundir.file(SKILLS_FILE), "name", s.export_dict())
