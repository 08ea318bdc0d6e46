"""The `dvk bench` run: many candidates, one suite, a results file and a Fast_p table.

Covers: pairing suite tasks with candidate files (a missing file is an unsolved task;
how many were missing is printed, with a hint when none matched the suite's names),
concurrent evaluation on the local pool or a Ray cluster with a live progress bar,
``RUN_DIR/results.jsonl`` appended one whole, fsynced line per finished task,
``RUN_DIR/run.json`` metadata, and the summary table (Fast_p for p ∈ {0, 1, 1.2, 1.5, 2}
per level, ``n/a`` where timing was unavailable, geometric-mean speedup vs eager and
torch.compile) over every task the directory holds a line for. A problem that is itself broken
(its Model, get_inputs or get_init_inputs raised: stage ``problem``) is the problem's fault:
it is kept out of Fast_p's denominator and named in the summary (``broken_problems``).
``--shapes N`` judges each correct candidate at N drawn sizes too (``shapes.py``) and adds
the figures over sizes (``fast_p_shapes``).

``--candidates self`` is the harness self-check: no candidates folder; each problem's own
``Model`` is judged as its candidate (``EvalConfig.self_check``), every line is marked
``self_check``, run.json says candidates ``"self"`` (so the directory never mixes with a
real run; the default is ``runs/selfcheck-<time>``), and the summary is the self-check's
(``selfcheck``: finished problems, the spread of self-speedups, the
unfinished ones with why), never a Fast_p of solutions.

Resuming: a rerun with the same ``--out`` skips tasks that already have a line in
``results.jsonl`` (another ``--level`` adds its tasks beside the earlier ones) and is
refused when the directory was made for another suite or candidate set, or with an ``eval``
config that changes results (run.json records it; ``--allow-config-change FIELD`` accepts a change). The file is only
ever appended to, never deleted, with one exception: ``--retry-failed`` evaluates again the
tasks whose line is not correct (in a self-check, the problems that did not finish), and
each new line replaces the old one in a rewrite of the whole file that is atomic (an
interrupt leaves the old line). The other thing removed is a last line a kill cut short
(no newline: it never held a whole result), so that `dvk report`, which refuses lines that
are not results, can read a resumed run.

Interrupts: Ctrl-C stops the run at once. Worker processes are started with SIGINT
blocked, so the interrupt reaches only this process and cannot fail a candidate; results
that arrive after it are dropped, not recorded, and the command exits 130 saying how many
tasks are saved. Does not cover: how one candidate is judged (``davinci_kernel.evaluate``).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import queue
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Optional

from .. import provenance
from ..config import EvalConfig, refuse_changes
from ..errors import Interrupted, UsageError, check_out_dir
from ..evaluate.harness.pool import check_workers
from ..files import append_jsonl, drop_cut_line, print_json, read_jsonl, replace_jsonl_row, write_json
from ..records import EvalResult
from ..report.fastp import NA_NOTE, fastp_table, split_broken, timing_unavailable
from ..report.terminal import fastp_rich_table
from ..rundir import RESULTS_FILE, RUN_FILE, SUMMARY_FILE, claim, default_dir, only_setup
from ..tasks import candidate_path, load_suite, reference_dir, suite_id
from ..tasks.names import pick_tasks
from . import selfcheck

_SAME_RUN_KEYS = ("suite", "candidates", "shapes")
SELF = "self"  # --candidates self: the harness self-check


def collect(suite: str, candidates: str, level: Optional[int], patterns: Optional[str] = None):
    """(tasks, [(task, candidate file)], tasks without a file, candidates folder); with
    ``self`` every task is paired with None (its own Model) and there is no folder.
    ``patterns``: only the tasks ``pick`` keeps."""
    tasks = load_suite(suite, level=level, strict=False)
    if not tasks:
        raise UsageError(f"suite {suite!r} has no tasks" + (f" at level {level}" if level else ""))
    tasks = pick_tasks(tasks, patterns)
    if candidates == SELF:
        return tasks, [(t, None) for t in tasks], [], None
    cand_dir = reference_dir(suite) if candidates == "reference" else Path(candidates).expanduser()
    if not cand_dir.is_dir():
        what = "is a file, not a folder" if cand_dir.exists() else "not found"
        raise UsageError(f"candidates folder {cand_dir} {what}: give a folder mirroring the suite "
                         "(levelN/<id>_<Name>.py), 'reference' or 'self'")
    items, missing = [], []
    for t in tasks:
        p = candidate_path(cand_dir, t)
        if p.is_file():
            items.append((t, p))
        else:
            missing.append(t)
    return tasks, items, missing, cand_dir


def read_results(path: Path) -> dict[str, dict]:
    """Task → its result line (the last one, should a task have several); lines that do not
    parse (a line cut by a kill) are skipped."""
    if not path.is_file():
        return {}
    return {d["task"]: d for d in read_jsonl(path) if d.get("task")}


def _open_run_dir(run_dir: Path, meta: dict, allow: tuple = ()) -> dict:
    """Create the directory or check that it holds the same suite and candidates; return the
    run.json to write (with a ``resumed`` count)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    p = run_dir / RUN_FILE
    old: dict = {}
    if p.is_file() and not only_setup(run_dir):  # a folder with no result yet counts as empty
        try:
            old = json.loads(p.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            raise UsageError(f"{p} is not a bench run.json: choose another --out") from None
        if not isinstance(old, dict) or old.get("kind", "bench") != "bench":
            raise UsageError(f"{run_dir} holds a {old.get('kind') if isinstance(old, dict) else 'different'} run, "
                             "not a dvk bench run: choose another --out")
        for key in _SAME_RUN_KEYS:
            if key in old and old[key] != meta[key]:
                raise UsageError(f"{run_dir} was made for {key} {old[key]!r}, not {meta[key]!r}: rerun with the "
                                 "same --suite and --candidates to resume it, or choose another --out")
        if isinstance(old.get("config"), dict):  # run.json of a run made before configs were recorded: none
            refuse_changes(old["config"], meta["config"], allow, str(run_dir))
    elif (run_dir / RESULTS_FILE).is_file():
        raise UsageError(f"{run_dir} has a results.jsonl but no run.json (not made by dvk bench): "
                         "choose another --out")
    if old:
        meta = {**old, **meta, "resumed": int(old.get("resumed", 0)) + 1}
    return meta


def run_bench(suite: str, candidates: str, device: str = "auto", workers: Optional[int] = None,
              backend: str = "local", level: Optional[int] = None, out: Optional[Path] = None,
              json_out: bool = False, cfg: Optional[EvalConfig] = None, retry_failed: bool = False,
              patterns: Optional[str] = None, allow: tuple = (), shapes: int = 0) -> dict:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    check_workers(workers)  # before any task is read or worker started (the Ray backend too)
    self_check = candidates == SELF
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    default_out = default_dir(f"selfcheck-{stamp}" if self_check else f"bench-{stamp}")
    run_dir = check_out_dir(Path(out) if out else default_out)
    tasks, items, missing, cand_dir = collect(suite, candidates, level, patterns)
    cfg = cfg or EvalConfig(device=device)
    if self_check:
        cfg = dataclasses.replace(cfg, self_check=True)
    results_path = run_dir / RESULTS_FILE
    console = Console(stderr=True)
    lock = threading.Lock()

    with claim(run_dir):
        named = candidates if candidates in ("reference", SELF) else str(cand_dir.resolve())
        meta = _open_run_dir(run_dir, {"kind": "bench", "suite": suite_id(suite), "candidates": named,
                                       "shapes": shapes, "config": {"eval": dataclasses.asdict(cfg)}}, allow)
        if self_check:
            meta["self_check"] = True
        drop_cut_line(results_path)
        done_before = read_results(results_path)
        results: dict[str, dict] = dict(done_before)
        names = {t.name for t, _ in items}
        retried = {name for name, d in done_before.items()
                   if retry_failed and name in names and not d.get("correct") and d.get("stage") != "missing"}
        done_before = {name: d for name, d in done_before.items() if name not in retried}

        def write(r: EvalResult, cand: Optional[Path]) -> None:
            d = r.to_dict()
            d["candidate"] = str(cand) if cand else None
            with lock:
                results[d["task"]] = d
                if d["task"] in retried:
                    replace_jsonl_row(results_path, "task", d)
                else:
                    append_jsonl(results_path, [d])

        todo = [(t, p) for t, p in items if t.name not in done_before]
        skipped = len(items) - len(todo)
        if not self_check:
            _report_missing(console, tasks, items, missing, cand_dir, candidates)
        if skipped or retried:
            again = f" ({len(retried)} that failed run again)" if retried else ""
            console.print(f"resuming {run_dir}: {skipped} task(s) already in {RESULTS_FILE} skipped, "
                          f"{len(todo)} to run{again}")

        all_tasks = load_suite(suite, strict=False) if level is not None or patterns else tasks
        levels = {t.level for t in tasks} | {int(r.get("level") or 0) for r in results.values()}
        totals = {lvl: sum(1 for t in all_tasks if t.level == lvl) for lvl in sorted(levels)}
        recorded = {k: meta[k] for k in ("device", "workers") if k in meta and meta.get("resumed")}
        meta.update({"device": cfg.device, "backend": backend,
                     "date": datetime.datetime.now().isoformat(timespec="seconds"), "tasks": len(tasks),
                     "missing": len(missing), "totals": {str(k): v for k, v in totals.items()},
                     "level": level, "tasks_pattern": patterns, "command": " ".join(sys.argv)})
        meta.update(recorded)  # a resume keeps what the run recorded (its evaluator's device, workers) ...

        if todo:
            # Ray's local cluster dies with the thread that started it (its processes get a
            # parent-death signal): start it in this thread; local workers start in a SIGINT-blocked one.
            evaluator = (_make_evaluator(backend, cfg, workers) if backend == "ray"
                         else _quiet(lambda: _make_evaluator(backend, cfg, workers)))
            if shapes:
                from .shapes import ShapedEvaluator

                evaluator = ShapedEvaluator(evaluator, shapes)
            meta.update({"device": evaluator.device, "workers": evaluator.n_workers})  # ... unless it evaluates
            meta = provenance.record(meta, old=meta, sandbox=getattr(evaluator, "sandbox_description", None))
        for t in missing:
            if t.name not in done_before:
                write(EvalResult(task=t.name, level=t.level, stage="missing", error_kind="missing",
                                 error_msg="no candidate file"), None)
        write_json(run_dir / RUN_FILE, meta)
        if todo:
            stop = threading.Event()
            try:
                with Progress(TextColumn("[bold]bench[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                              TextColumn("{task.description}"), console=console, transient=False) as prog:
                    bar = prog.add_task("", total=len(todo))

                    def done(i: int, r: EvalResult) -> None:
                        if stop.is_set():  # arrived after Ctrl-C: maybe cut short, never recorded
                            return
                        write(r, todo[i][1])
                        mark = "ok" if r.correct else (r.error_kind or ",".join(r.flags) or "fail")
                        prog.update(bar, advance=1, description=f"{r.task} {mark}")

                    pairs, idx = [], []
                    for i, (t, p) in enumerate(todo):
                        source, why = _read_candidate(p)
                        if why is None:
                            pairs.append((t, source))
                            idx.append(i)
                        else:  # an unreadable candidate is that task's result, not the end of the run
                            done(i, EvalResult(task=t.name, level=t.level, stage="missing", error_kind="unreadable",
                                               error_msg=why))
                    _evaluate_all(evaluator, backend, pairs, lambda j, r: done(idx[j], r), stop)
            except KeyboardInterrupt:
                stop.set()
                old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the clean-up below finish
                try:
                    console.print("stopping workers…")
                    evaluator.close()
                finally:
                    signal.signal(signal.SIGINT, old)
                n_saved = sum(1 for t in tasks if t.name in results)
                raise Interrupted(f"{n_saved} of {len(tasks)} tasks saved in {results_path} (tasks in flight "
                                  f"were not recorded); rerun with --out {run_dir} to finish") from None
            else:
                evaluator.close()
        return _summarize(run_dir, results_path, results, totals, meta, json_out)


def _summarize(run_dir: Path, results_path: Path, results: dict, totals: dict, meta: dict, json_out: bool) -> dict:
    from rich.console import Console

    rows = list(results.values())
    if meta.get("self_check"):
        return _summarize_self_check(run_dir, results_path, rows, meta, json_out)
    rows, totals, broken = split_broken(rows, totals)  # the problem's fault: out of Fast_p's denominator
    table = fastp_table(rows, totals=totals)
    summary = {"run_dir": str(run_dir), "results": str(results_path), **meta,
               "fast_p": {str(k): v for k, v in table.items()},
               "broken_problems": [{"task": r["task"], "error": _first_line(r.get("error_msg"))} for r in broken]}
    na = timing_unavailable(table)
    if na:
        summary["note"] = NA_NOTE
    if meta.get("shapes"):
        from .shapes import suite_shapes

        summary["fast_p_shapes"] = suite_shapes(rows, total=sum(totals.values()) if totals else None)
    write_json(run_dir / SUMMARY_FILE, summary)
    if json_out:
        print_json(summary)
    else:
        out = Console()
        if not out.is_terminal:  # logs and pipes: room for the whole table
            out = Console(width=120)
        out.print(fastp_rich_table(table, "Fast_p (share of tasks correct and faster than eager by > p)"))
        if na:
            out.print(NA_NOTE)
        if summary.get("fast_p_shapes"):
            out.print(_shapes_line(summary["fast_p_shapes"], meta["shapes"]), highlight=False, soft_wrap=True)
        for b in summary["broken_problems"]:
            out.print(f"broken problem (not counted in Fast_p): {b['task']}: {b['error']}", markup=False,
                      highlight=False)
        out.print(f"results: {results_path}")
    return summary


def _shapes_line(sh: dict, n: int) -> str:
    """The suite's figures over sizes (``shapes.suite_shapes``) in one line."""
    from ..report.page import fmt_fastp, fmt_x

    parts = [f"{'correct' if k == 'fast_0' else k} {fmt_fastp(v)}" for k, v in sh.items() if k.startswith("fast_")]
    return (f"over the task's size and {n} drawn sizes ({sh['tasks']} tasks judged at them): " + ", ".join(parts)
            + f", geomean {fmt_x(sh.get('geomean'))}")


def _first_line(text) -> str:
    lines = [x.strip() for x in str(text or "").strip().splitlines() if x.strip()]
    return lines[-1][:300] if lines else "its Model or inputs failed"


def _summarize_self_check(run_dir: Path, results_path: Path, rows: list, meta: dict, json_out: bool) -> dict:
    sc = selfcheck.summarize(rows)
    summary = {"run_dir": str(run_dir), "results": str(results_path), **meta, "self_check": True,
               "harness_self_check": sc}
    write_json(run_dir / SUMMARY_FILE, summary)
    if json_out:
        print_json(summary)
    else:
        for line in selfcheck.lines(sc):
            print(line)
        print(f"results: {results_path}")
    return summary


def _report_missing(console, tasks, items, missing, cand_dir: Path, candidates: str) -> None:
    if not missing:
        return
    console.print(f"{len(missing)} of {len(tasks)} candidate files missing in {cand_dir} (counted as unsolved)",
                  highlight=False)
    if not items and candidates != "reference":
        example = candidate_path(cand_dir, tasks[0])
        found = sorted(str(p.relative_to(cand_dir)) for p in cand_dir.rglob("*.py"))[:3]
        seen = f"; found e.g. {', '.join(found)}" if found else "; it holds no .py files"
        console.print(f"hint: no file matched the suite's names: expected e.g. {example}{seen}", highlight=False)


def _read_candidate(path: Optional[Path]) -> tuple[Optional[str], Optional[str]]:
    """(source, None), or (None, why) for a candidate file that cannot be read as UTF-8 text."""
    if path is None:
        return None, None
    try:
        return path.read_text(encoding="utf-8"), None
    except UnicodeDecodeError as e:
        return None, f"{path} is not UTF-8 text (byte {e.start}: {e.reason})"
    except OSError as e:
        return None, f"{path} cannot be read: {e.strerror or e}"


def _block_sigint() -> None:
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def _quiet(fn: Callable):
    """Run ``fn`` in a thread that blocks SIGINT, so worker processes it starts inherit the
    blocked signal: Ctrl-C at the terminal reaches only this process."""
    box: dict = {}

    def target() -> None:
        _block_sigint()
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            box["error"] = e

    t = threading.Thread(target=target, name="dvk-bench-start", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _evaluate_all(evaluator, backend: str, pairs: list, done: Callable, stop: threading.Event) -> None:
    """Every pair through ``evaluator``; ``done(i, result)`` as each finishes. Local: one daemon
    thread per worker with SIGINT blocked (replacement workers they start inherit that), so the
    main thread stays free to take Ctrl-C at once."""
    if backend == "ray":
        evaluator.evaluate_many(pairs, progress=done)
        return
    q: queue.Queue[int] = queue.Queue()
    for i in range(len(pairs)):
        q.put(i)
    errors: list = []

    def loop() -> None:
        _block_sigint()
        while not stop.is_set():
            try:
                i = q.get_nowait()
            except queue.Empty:
                return
            try:
                r = evaluator.evaluate(*pairs[i])
            except BaseException as e:  # noqa: BLE001 - a harness bug, after a stop: ignored
                if not stop.is_set():
                    errors.append(e)
                    stop.set()
                return
            done(i, r)

    threads = [threading.Thread(target=loop, name=f"dvk-bench-{k}", daemon=True)
               for k in range(max(1, min(evaluator.n_workers, len(pairs))))]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)
    if errors:
        raise errors[0]


def _make_evaluator(backend: str, cfg: EvalConfig, workers: Optional[int]):
    if backend == "ray":
        from ..evaluate.harness.ray_pool import RayEvaluator

        return RayEvaluator(cfg, workers=workers)
    from ..evaluate import Evaluator

    return Evaluator(cfg, workers=workers)
