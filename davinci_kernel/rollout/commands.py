"""`dvk optimize` and `dvk run`: argument parsing and printing around ``optimize`` / ``suite``.

Covers: options, the default run directory, live progress, and the closing tables
(turns and speedups of each rollout for ``optimize``; Fast_p per level at the last and
best turn for ``run``). In both, ``--skills on|off`` is the switch (default on: for
``optimize`` all three agents on the default library), ``--db PATH`` the library and
``--no-seed`` keeps a new library empty (the same flag as ``dvk skills``); ``run`` also takes
``--select llm|bm25|none`` (``skills.select_mode``: the paper's selection ablations).
Bad options are ``UsageError`` (one line, exit 2); Ctrl-C is ``Interrupted`` (exit 130). Failed
model calls are counted: the count and the first reason go to stderr, and when every call
failed the command exits 3 (``errors.AllCallsFailed``) after saving what it has.
Does not cover: the work itself.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from ..cliconfig import CONFIG_HELP, OVERRIDES_HELP, RERUN_ALLOW_HELP
from ..config import RolloutConfig, SkillsConfig
from ..errors import Interrupted, UsageError, check_out_dir
from ..files import print_json
from ..llm.spec import MODEL_HELP, check_backend_spec
from ..rundir import BEST_CODE, RESULTS_FILE, claim, default_dir, saved_note

_RC = RolloutConfig()
SKILLS_HELP = "on | off: the skill library's agents (selection, summaries, admission); off = the policy agent alone"
DB_HELP = (f"skill library (SQLite; default {SkillsConfig().db}); a new one is created, seeded with the "
           "bundled skills unless --no-seed")
SEED_HELP = ("seed a new library with the bundled skills (--no-seed: start it empty, as the paper does; "
             "a library that holds skills is never seeded)")
SELECT_HELP = ("how skills are chosen (skills.select_mode, as in training): llm = BM25 top-20 reranked by the "
               "selection agent; bm25 = the BM25 top skills, no model call; none = no skills "
               "(bm25, none: the paper's ablations); default llm, none with --skills off")
SELECT_MODES = ("llm", "bm25", "none")
DEVICE_HELP = "cpu, cuda or cuda:N (default: cuda when present)"


def _rollout_cfg(turns: int, language: str, temperature: Optional[float], max_new_tokens: Optional[int],
                 k: Optional[int] = None, n: Optional[int] = None, s: Optional[int] = None):
    from ..config import RolloutConfig

    if turns < 1:
        raise UsageError(f"--turns {turns}: must be at least 1")
    if max_new_tokens is not None and max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens {max_new_tokens}: must be at least 1")
    if language not in ("triton", "cuda"):
        raise UsageError(f"--language {language}: use triton or cuda")
    rc = RolloutConfig(turns=turns, language=language)
    if temperature is not None:
        if temperature < 0:
            raise UsageError("--temperature must be >= 0")
        rc.temperature = temperature
    if max_new_tokens is not None:
        rc.max_new_tokens = max_new_tokens
    for name, value in (("k_schemes", k), ("n_rollouts", n), ("s_summaries", s)):
        if value is not None:
            if value < (0 if name == "k_schemes" else 1):
                raise UsageError(f"--{name.split('_')[1]} {value}: too small")
            setattr(rc, name, value)
    return rc


_FLAG_FIELDS = {"turns": "rollout.turns", "language": "rollout.language", "temperature": "rollout.temperature",
                "max_new_tokens": "rollout.max_new_tokens", "schemes": "rollout.k_schemes",
                "rollouts": "rollout.n_rollouts", "summaries": "rollout.s_summaries", "device": "eval.device",
                "db": "skills.db", "seed": "skills.seed_library", "select": "skills.select_mode"}


def _agent_config(ctx, config: Optional[str], overrides: Optional[list[str]], command: str, **flags):
    """The config of ``dvk optimize``/``run``: --config, overrides, then the flags given (each a
    shorthand for the field in ``_FLAG_FIELDS``)."""
    from ..cliconfig import command_config

    return command_config(ctx, config, overrides, {k: ((_FLAG_FIELDS[k],), v) for k, v in flags.items()},
                          ("eval", "skills", "rollout", "reward"), command)


def _db_of(cfg) -> Optional[str]:
    """The library path a command was given (None: the default one)."""
    return None if cfg.skills.db == SkillsConfig().db else cfg.skills.db


def _check_skills(skills: str) -> bool:
    if skills not in ("on", "off"):
        hint = " (the library's path is --db PATH)" if skills.endswith(".db") or "/" in skills else ""
        raise UsageError(f"--skills {skills}: use on or off{hint}")
    return skills == "on"


def _check_select(select: Optional[str], use_skills: bool) -> str:
    """The effective ``skills.select_mode``: ``--select`` checked against ``--skills``."""
    if select is not None and select not in SELECT_MODES:
        raise UsageError(f"--select {select}: use llm, bm25 or none")
    if not use_skills:
        if select not in (None, "none"):
            raise UsageError(f"--select {select} needs --skills on (--skills off runs the policy agent alone)")
        return "none"
    return select or "llm"


def _note_seed(db: Optional[str], seed: bool, used: bool) -> None:
    """--no-seed on a library that already holds skills changes nothing: say so on stderr."""
    if seed or not used:
        return
    path = Path(db or SkillsConfig().db).expanduser()
    if path.is_file() and path.stat().st_size > 0:
        typer.echo(f"note: --no-seed applies to a new library only; {path} exists and is used as it is", err=True)


def _say_failures(failures) -> None:
    """``N of M model calls failed; the first: REASON`` on stderr, when any failed."""
    line = failures.line()
    if line:
        typer.echo(f"warning: {line}", err=True)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:60] or "run"


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _turn_cell(turn) -> str:
    if turn.completion is not None and turn.completion.error:
        return "gen failed"
    r = turn.result
    if r is None:
        return "no code"
    if r.correct:
        return f"ok {_fmt(r.speedup)}" if r.speedup is not None else "ok (untimed)"
    return r.error_kind or r.stage


def _print_optimize(out: dict, rundir) -> None:
    from rich.console import Console
    from rich.table import Table

    group = out["group"]
    turns = max((len(e.turns) for e in group.episodes), default=0)
    t = Table(title=f"{group.task}: rollouts")
    for col in ["scheme", "skills"] + [f"turn {i + 1}" for i in range(turns)]:
        t.add_column(col)
    for ep in group.episodes:
        t.add_row(str(ep.scheme), ", ".join(ep.skills) or "-", *[_turn_cell(x) for x in ep.turns])
    con = Console()
    con.print(t)
    best = out["best"]
    if out["best_code"] is None:
        con.print("no reply contained code; see groups.jsonl for the replies")
    else:
        status = "correct" if best is not None and best.correct else "not correct"
        con.print(f"best: {status}, speedup {_fmt(best.speedup if best else None)} → {rundir.file(BEST_CODE)}")
    for s in out["admitted"]:
        con.print(f"new skill admitted: {s.name} (verified {_fmt(s.verify_speedup)})")


def _optimize_json(out: dict, rundir, task) -> dict:
    """The one JSON document of ``dvk optimize --json``."""
    best = out["best"]
    return {"run_dir": str(rundir.path), "task": task.name, "resumed": bool(out.get("resumed")),
            "best": best.to_dict() if best is not None else None,
            "best_code": str(rundir.file(BEST_CODE)) if out["best_code"] is not None else None,
            "where": dict(zip(("scheme", "rollout", "turn"), out["where"])) if out["where"] else None,
            "rollouts": [{"scheme": ep.scheme, "skills": list(ep.skills), "turns": [_turn_cell(x) for x in ep.turns]}
                         for ep in out["group"].episodes],
            "admitted": [{"name": s.name, "verify_speedup": s.verify_speedup} for s in out["admitted"]],
            "failed_calls": out["failures"].failed, "model_calls": out["failures"].total}


def _print_fastp(summary: dict, title: str) -> None:
    from rich.console import Console

    from ..report.terminal import fastp_rich_table

    con = Console()
    con.print(title)
    for which, table in summary.items():
        con.print(fastp_rich_table(table, f"{which} turn"))


def register(app: typer.Typer) -> None:
    @app.command("optimize")
    def optimize_cmd(
        ctx: typer.Context,
        problem: str = typer.Argument(..., metavar="PROBLEM", help="KernelBench-format problem (Model, get_inputs, "
                                      "get_init_inputs): a file, or builtin:level1/3_Softmax, kernelbench:DIR:level1/19_ReLU"),
        model: str = typer.Option(..., "--model", help=MODEL_HELP),
        turns: int = typer.Option(_RC.turns, "--turns", help="policy turns per rollout"),
        device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
        skills: str = typer.Option("on", "--skills", help=SKILLS_HELP),
        select: Optional[str] = typer.Option(None, "--select", help=SELECT_HELP + "; summaries and admission "
                                             "still run with --skills on", show_default=False),
        db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
        seed: bool = typer.Option(True, "--seed/--no-seed", help=SEED_HELP),
        out: Optional[Path] = typer.Option(None, "--out", help="run directory, created with missing parent folders "
                                                              "(default runs/optimize-<problem>)"),
        schemes: int = typer.Option(_RC.k_schemes, "--schemes", help="selection samples k (with --skills on)"),
        rollouts: int = typer.Option(_RC.n_rollouts, "--rollouts", help="rollouts per scheme n"),
        summaries: int = typer.Option(_RC.s_summaries, "--summaries", help="summary samples s (with --skills on)"),
        language: str = typer.Option(_RC.language, "--language", help="triton | cuda"),
        temperature: float = typer.Option(_RC.temperature, "--temperature", help="sampling temperature"),
        max_new_tokens: int = typer.Option(_RC.max_new_tokens, "--max-new-tokens", help="generation limit per call"),
        workers: Optional[int] = typer.Option(None, "--workers", help="evaluation worker processes "
                                                                      "(default: one per GPU, 2 on CPU)"),
        config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP),
        allow: Optional[list[str]] = typer.Option(None, "--allow-config-change", metavar="FIELD",
                                                  help=RERUN_ALLOW_HELP),
        json_out: bool = typer.Option(False, "--json", help="print one JSON summary on stdout (the best result, "
                                      "where it is, the admitted skills)"),
        overrides: Optional[list[str]] = typer.Argument(None, metavar="SECTION.KEY=VALUE", help=OVERRIDES_HELP),
    ) -> None:
        """Optimize one PyTorch module with the agent loop; writes RUN_DIR/best.py.

        By default all three agents run on the default library: skill selection, the policy
        and skill summaries (--skills off: the policy agent alone; --select bm25|none: the
        selection ablations, summaries still on)."""
        from ..tasks import check_problem_source, load_task
        from .optimize import OptimizeSettings, optimize
        from .progress import live

        task = load_task(problem)
        problem_error = check_problem_source(task.source)
        if problem_error:
            raise UsageError(f"{problem}: not a KernelBench-format problem ({problem_error})")
        use_skills = _check_skills(skills)
        _check_select(select, use_skills)
        _rollout_cfg(turns, language, temperature, max_new_tokens, schemes, rollouts, summaries)
        cfg = _agent_config(ctx, config, overrides, "optimize", turns=turns, language=language,
                            temperature=temperature, max_new_tokens=max_new_tokens, schemes=schemes,
                            rollouts=rollouts, summaries=summaries, device=device, db=db, seed=seed, select=select)
        rc, db, seed = cfg.rollout, _db_of(cfg), cfg.skills.seed_library
        select_mode = cfg.skills.select_mode if use_skills else "none"
        out_dir = check_out_dir(out or default_dir(f"optimize-{_slug(Path(task.name).name)}"))
        check_backend_spec(model)  # before the folder is made
        if db is not None and use_skills:
            from ..skills.store import check_library_path

            check_library_path(Path(db).expanduser())
        _note_seed(db, seed, use_skills)
        settings = OptimizeSettings(model=model, device=cfg.eval.device, workers=workers, skills=use_skills,
                                    skills_db=db, rollout=rc, seed_library=seed, select=select_mode,
                                    eval_cfg=cfg.eval, skills_cfg=cfg.skills, reward=cfg.reward,
                                    allow=tuple(allow or ()))
        with claim(out_dir) as rundir:
            try:
                with live(rc.turns, "turn", f"optimize {task.title}") as progress:
                    result = optimize(task, settings, rundir, progress=progress)
            except KeyboardInterrupt:
                raise Interrupted(f"{saved_note(rundir.path)} (the task group is saved when it ends; library "
                                  "writes are all-or-nothing)") from None
            _say_failures(result["failures"])
            if result.get("resumed"):
                typer.echo(f"{rundir.path} already holds this run's finished task group: nothing redone "
                           "(choose another --out to optimize again)", err=True)
            if json_out:
                print_json(_optimize_json(result, rundir, task))
            else:
                _print_optimize(result, rundir)
            result["failures"].check()  # every call failed: exit 3

    @app.command("run")
    def run_cmd(
        ctx: typer.Context,
        suite: str = typer.Option("builtin", "--suite", help="builtin | kernelbench:DIR | hf:NAME_OR_PATH"),
        model: str = typer.Option(..., "--model", help=MODEL_HELP),
        skills: str = typer.Option("on", "--skills", help=SKILLS_HELP + " (the paper's ablation)"),
        select: Optional[str] = typer.Option(None, "--select", help=SELECT_HELP, show_default=False),
        turns: int = typer.Option(_RC.turns, "--turns", help="policy turns per task"),
        out: Optional[Path] = typer.Option(None, "--out", help="run directory, created with missing parent folders; "
                                                              "rerun with the same --out to resume"),
        level: Optional[int] = typer.Option(None, "--level", help="only this level"),
        task_patterns: Optional[str] = typer.Option(None, "--tasks", help="only the tasks whose name matches one of "
                                                    "these comma-separated shell patterns, e.g. 'level2/77_*,*Softmax*' "
                                                    "(a pattern matching no task is an error)"),
        device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
        db: Optional[str] = typer.Option(None, "--db", help=DB_HELP),
        seed: bool = typer.Option(True, "--seed/--no-seed", help=SEED_HELP),
        parallel: int = typer.Option(1, "--parallel", help="tasks in flight at once"),
        language: str = typer.Option(_RC.language, "--language", help="triton | cuda"),
        temperature: float = typer.Option(_RC.temperature, "--temperature", help="sampling temperature"),
        max_new_tokens: int = typer.Option(_RC.max_new_tokens, "--max-new-tokens", help="generation limit per call"),
        workers: Optional[int] = typer.Option(None, "--workers", help="evaluation worker processes "
                                                                      "(default: one per GPU, 2 on CPU)"),
        config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP),
        allow: Optional[list[str]] = typer.Option(None, "--allow-config-change", metavar="FIELD",
                                                  help=RERUN_ALLOW_HELP),
        json_out: bool = typer.Option(False, "--json", help="print one JSON summary on stdout (Fast_p at the last "
                                      "and best turn, tasks run and resumed)"),
        overrides: Optional[list[str]] = typer.Argument(None, metavar="SECTION.KEY=VALUE", help=OVERRIDES_HELP),
    ) -> None:
        """Run every task of a suite through the episode; Fast_p at the last and best turn.

        The library is read, never changed. --select: how skills are chosen; --no-seed: a new --db starts empty."""
        from ..tasks import load_suite
        from ..tasks.names import pick_tasks
        from .progress import live
        from .suite import RunSettings, run_suite

        use_skills = _check_skills(skills)
        _check_select(select, use_skills)
        if parallel < 1:
            raise UsageError("--parallel must be at least 1")
        _rollout_cfg(turns, language, temperature, max_new_tokens)
        cfg = _agent_config(ctx, config, overrides, "run", turns=turns, language=language, temperature=temperature,
                            max_new_tokens=max_new_tokens, device=device, db=db, seed=seed, select=select)
        rc, db, seed, turns = cfg.rollout, _db_of(cfg), cfg.skills.seed_library, cfg.rollout.turns
        select_mode = cfg.skills.select_mode if use_skills else "none"
        tasks = load_suite(suite, level=level, strict=False)
        if not tasks:
            raise UsageError(f"suite {suite} has no tasks" + (f" at level {level}" if level else ""))
        tasks = pick_tasks(tasks, task_patterns)
        name = f"run-{_slug(suite)}-skills_{skills}" + (f"-select_{select_mode}" if select_mode != "llm"
                                                         and skills == "on" else "")
        out_dir = check_out_dir(out or default_dir(name))
        check_backend_spec(model)  # before the folder is made
        uses_library = select_mode != "none"
        if db is not None and uses_library:
            from ..skills.store import check_library_path

            check_library_path(Path(db).expanduser())
        _note_seed(db, seed, uses_library)
        settings = RunSettings(model=model, suite=suite, skills=skills == "on", turns=turns, device=cfg.eval.device,
                               workers=workers, parallel=parallel, skills_db=db, rollout=rc, select=select_mode,
                               seed_library=seed, eval_cfg=cfg.eval, skills_cfg=cfg.skills, reward=cfg.reward,
                               allow=tuple(allow or ()))
        with claim(out_dir) as rundir:
            with live(len(tasks), "task", f"run {suite}") as progress:
                res = run_suite(tasks, settings, rundir, progress=progress)
            _say_failures(res["failures"])
            if json_out:
                print_json({"run_dir": str(rundir.path), "results": str(rundir.file(RESULTS_FILE)), "suite": suite,
                            "model": model, "skills": skills, "select": select_mode, "done": res["done"],
                            "resumed": res["skipped"], "fast_p": res["summary"],
                            "failed_calls": res["failures"].failed, "model_calls": res["failures"].total,
                            "broken_problems": res["broken"]})
            else:
                how = f"skills {skills}" + (f", select {select_mode}" if skills == "on" else "")
                _print_fastp(res["summary"], f"{suite}, {how}: {res['done']} run, {res['skipped']} resumed")
                for name in res["broken"]:
                    typer.echo(f"broken problem (not counted in Fast_p): {name}")
                typer.echo(f"results: {rundir.file(RESULTS_FILE)}  (dvk report {rundir.path})")
            res["failures"].check()  # every call failed: exit 3
