"""`dvk optimize` and `dvk run`: argument parsing and printing around ``optimize`` / ``suite``.

Covers: options, the default run directory, live progress, and the closing tables
(turns and speedups of each rollout for ``optimize``; Fast_p per level at the last and
best turn for ``run``). Bad options are ``UsageError`` (one line, exit 2).
Does not cover: the work itself.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError

MODEL_HELP = "openai:URL#MODEL (vLLM, SGLang, an API) | hf:PATH (local transformers) | script:FILE.py"
DEVICE_HELP = "cpu, cuda or cuda:N (default: cuda when present)"


def _rollout_cfg(turns: int, language: str, temperature: Optional[float], max_new_tokens: Optional[int],
                 k: Optional[int] = None, n: Optional[int] = None, s: Optional[int] = None):
    from ..config import RolloutConfig

    if turns < 1:
        raise UsageError(f"--turns {turns}: must be at least 1")
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
        con.print(f"best: {status}, speedup {_fmt(best.speedup if best else None)} → {rundir.file('best.py')}")
    for s in out["admitted"]:
        con.print(f"new skill admitted: {s.name} (verified {_fmt(s.verify_speedup)})")


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
        problem: Path = typer.Argument(..., help="KernelBench-format file defining Model, get_inputs, get_init_inputs"),
        model: str = typer.Option(..., "--model", help=MODEL_HELP),
        turns: int = typer.Option(3, "--turns", help="policy turns per rollout"),
        device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
        skills: Optional[str] = typer.Option(None, "--skills", help="skill library (SQLite); enables selection, summaries and admission"),
        out: Optional[Path] = typer.Option(None, "--out", help="run directory (default runs/optimize-<problem>)"),
        schemes: Optional[int] = typer.Option(None, "--schemes", help="selection samples k (default 3)"),
        rollouts: Optional[int] = typer.Option(None, "--rollouts", help="rollouts per scheme n (default 4)"),
        summaries: Optional[int] = typer.Option(None, "--summaries", help="summary samples s (default 8)"),
        language: str = typer.Option("triton", "--language", help="triton | cuda"),
        temperature: Optional[float] = typer.Option(None, "--temperature", help="sampling temperature (default 1.0)"),
        max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="generation limit per call"),
        workers: Optional[int] = typer.Option(None, "--workers", help="evaluation worker processes"),
    ) -> None:
        """Optimize one PyTorch module with the agent loop; writes RUN_DIR/best.py."""
        from ..tasks import check_problem_source, load_task_file
        from .optimize import OptimizeSettings, optimize
        from .progress import live
        from .rundir import RunDir

        task = load_task_file(problem)
        problem_error = check_problem_source(task.source)
        if problem_error:
            raise UsageError(f"{problem}: not a KernelBench-format problem ({problem_error})")
        rc = _rollout_cfg(turns, language, temperature, max_new_tokens, schemes, rollouts, summaries)
        rundir = RunDir(out or Path("runs") / f"optimize-{_slug(problem.stem)}")
        settings = OptimizeSettings(model=model, device=device, workers=workers, skills_db=skills, rollout=rc)
        with live(rc.turns, "turn", f"optimize {task.title}") as progress:
            result = optimize(task, settings, rundir, progress=progress)
        _print_optimize(result, rundir)

    @app.command("run")
    def run_cmd(
        suite: str = typer.Option("builtin", "--suite", help="builtin | kernelbench:DIR | hf:NAME_OR_PATH"),
        model: str = typer.Option(..., "--model", help=MODEL_HELP),
        skills: str = typer.Option("on", "--skills", help="on | off: inject selected skills (the paper's ablation)"),
        turns: int = typer.Option(3, "--turns", help="policy turns per task"),
        out: Optional[Path] = typer.Option(None, "--out", help="run directory; rerun with the same --out to resume"),
        level: Optional[int] = typer.Option(None, "--level", help="only this level"),
        device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
        db: Optional[str] = typer.Option(None, "--db", help="skill library (default: the config's skills.db)"),
        parallel: int = typer.Option(1, "--parallel", help="tasks in flight at once"),
        language: str = typer.Option("triton", "--language", help="triton | cuda"),
        temperature: Optional[float] = typer.Option(None, "--temperature", help="sampling temperature (default 1.0)"),
        max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", help="generation limit per call"),
        workers: Optional[int] = typer.Option(None, "--workers", help="evaluation worker processes"),
    ) -> None:
        """Run every task of a suite through the episode; Fast_p at the last and best turn."""
        from ..tasks import load_suite
        from .progress import live
        from .rundir import RunDir
        from .suite import RunSettings, run_suite

        if skills not in ("on", "off"):
            raise UsageError(f"--skills {skills}: use on or off")
        if parallel < 1:
            raise UsageError("--parallel must be at least 1")
        tasks = load_suite(suite, level=level)
        if not tasks:
            raise UsageError(f"suite {suite} has no tasks" + (f" at level {level}" if level else ""))
        rc = _rollout_cfg(turns, language, temperature, max_new_tokens)
        rundir = RunDir(out or Path("runs") / f"run-{_slug(suite)}-skills_{skills}")
        settings = RunSettings(model=model, suite=suite, skills=skills == "on", turns=turns, device=device,
                               workers=workers, parallel=parallel, skills_db=db, rollout=rc)
        with live(len(tasks), "task", f"run {suite}") as progress:
            res = run_suite(tasks, settings, rundir, progress=progress)
        _print_fastp(res["summary"], f"{suite}, skills {skills}: {res['done']} run, {res['skipped']} resumed")
        typer.echo(f"results: {rundir.file('results.jsonl')}  (dvk report {rundir.path})")
