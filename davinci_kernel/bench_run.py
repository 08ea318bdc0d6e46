"""The `dvk bench` run: many candidates, one suite, a results file and a Fast_p table.

Covers: pairing suite tasks with candidate files (a missing file is an unsolved task),
concurrent evaluation on the local pool or a Ray cluster with a live progress bar,
``RUN_DIR/results.jsonl`` appended one line per finished task (an interruption keeps
what finished), ``RUN_DIR/run.json`` metadata, and the summary table (Fast_p for
p ∈ {0, 1, 1.2, 1.5, 2} per level, geometric-mean speedup vs eager and torch.compile).
Does not cover: how one candidate is judged (``davinci_kernel.evaluate``).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import threading
from pathlib import Path
from typing import Optional

from .config import EvalConfig
from .errors import UsageError
from .evaluate.pool import check_workers
from .records import EvalResult
from .report.fastp import fastp_table
from .report.terminal import fastp_rich_table
from .tasks import candidate_path, load_suite, reference_dir


def collect(suite: str, candidates: str, level: Optional[int]):
    tasks = load_suite(suite, level=level)
    if not tasks:
        raise UsageError(f"suite {suite!r} has no tasks" + (f" at level {level}" if level else ""))
    cand_dir = reference_dir(suite) if candidates == "reference" else Path(candidates).expanduser()
    if not cand_dir.is_dir():
        raise UsageError(f"candidates folder not found: {cand_dir}")
    items, missing = [], []
    for t in tasks:
        p = candidate_path(cand_dir, t)
        if p.is_file():
            items.append((t, p))
        else:
            missing.append(t)
    return tasks, items, missing, cand_dir


def run_bench(suite: str, candidates: str, device: str = "auto", workers: Optional[int] = None,
              backend: str = "local", level: Optional[int] = None, out: Optional[Path] = None,
              json_out: bool = False, cfg: Optional[EvalConfig] = None) -> dict:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    check_workers(workers)  # before any task is read or worker started (the Ray backend too)
    tasks, items, missing, cand_dir = collect(suite, candidates, level)
    cfg = cfg or EvalConfig(device=device)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(out) if out else Path("runs") / f"bench-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=True)
    results_path = run_dir / "results.jsonl"
    console = Console(stderr=True)
    lock = threading.Lock()
    results: list[dict] = []

    def write(r: EvalResult, cand: Optional[Path]) -> None:
        d = r.to_dict()
        d["candidate"] = str(cand) if cand else None
        with lock:
            results.append(d)
            with open(results_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(d) + "\n")
                fh.flush()
                os.fsync(fh.fileno())

    if results_path.exists():
        results_path.unlink()
    for t in missing:
        write(EvalResult(task=t.name, level=t.level, stage="missing", error_kind="missing",
                         error_msg="no candidate file"), None)

    evaluator = _make_evaluator(backend, cfg, workers)
    meta = {"suite": suite, "candidates": str(cand_dir), "device": evaluator.device, "backend": backend,
            "workers": evaluator.n_workers,
            "date": datetime.datetime.now().isoformat(timespec="seconds"), "tasks": len(tasks),
            "missing": len(missing), "command": " ".join(sys.argv)}
    _write_json(run_dir / "run.json", meta)
    try:
        with Progress(TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}"), console=console, transient=False) as prog:
            bar = prog.add_task("", total=len(items))

            def done(i: int, r: EvalResult) -> None:
                write(r, items[i][1])
                mark = "ok" if r.correct else (r.error_kind or ",".join(r.flags) or "fail")
                prog.update(bar, advance=1, description=f"{r.task} {mark}")

            pairs = [(t, p.read_text(encoding="utf-8", errors="replace")) for t, p in items]
            evaluator.evaluate_many(pairs, progress=done)
    finally:
        evaluator.close()
    totals: dict = {}
    for t in tasks:
        totals[t.level] = totals.get(t.level, 0) + 1
    table = fastp_table(results, totals=totals)
    summary = {"run_dir": str(run_dir), "results": str(results_path), **meta,
               "fast_p": {str(k): v for k, v in table.items()}}
    _write_json(run_dir / "summary.json", summary)
    if json_out:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        out = Console()
        if not out.is_terminal:  # logs and pipes: room for the whole table
            out = Console(width=120)
        out.print(fastp_rich_table(table, "Fast_p (share of tasks correct and faster than eager by > p)"))
        if not any(r.get("timing_available") for r in results):
            out.print("timing unavailable on this device: Fast_p for p > 0 needs a GPU (--device cuda)")
        out.print(f"results: {results_path}")
    return summary


def _make_evaluator(backend: str, cfg: EvalConfig, workers: Optional[int]):
    if backend == "ray":
        from .evaluate.ray_pool import RayEvaluator

        return RayEvaluator(cfg, workers=workers)
    from .evaluate import Evaluator

    return Evaluator(cfg, workers=workers)


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    os.replace(tmp, path)
