"""`dvk tasks list`, `dvk eval`, `dvk bench`: the evaluation commands.

Covers: argument parsing and printing for listing suites, evaluating one candidate
file and evaluating a directory of candidates against a suite (results JSONL, Fast_p
table). Does not cover: evaluation itself (``davinci_kernel.evaluate``) or the bench
run loop (``bench``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..cliconfig import CONFIG_HELP, OVERRIDES_HELP, RERUN_ALLOW_HELP
from ..errors import Interrupted, UsageError, read_text_file
from ..files import print_json

PROBLEM_HELP = ("KernelBench-format problem (defines Model, get_inputs, get_init_inputs): a file, or a task by "
                "name: builtin:level1/3_Softmax, kernelbench:DIR:level1/19_ReLU (dvk tasks list shows the names)")
DEVICE_HELP = "cpu, cuda or cuda:N (default: cuda when present)"
TIMEOUT_HELP = ("seconds allowed to each stage of one candidate: building and importing it "
                "(eval.compile_timeout_s, default 180) and, separately, running its checks and timing "
                "(eval.run_timeout_s, default 120); sets both; must be > 0")


SHAPES_HELP = ("also judge and time each correct candidate at N sizes drawn as the perturbed re-check draws its "
               "size (the same N sizes for every candidate of a task): each size's speedup, their geometric mean "
               "and Fast_p over sizes beside the task-size figures; 0 = the task's size alone")
MAX_SHAPES = 16


def check_shapes(n: int) -> int:
    """``--shapes N``: 0 to ``MAX_SHAPES``."""
    if not 0 <= n <= MAX_SHAPES:
        raise UsageError(f"--shapes {n}: give 0 to {MAX_SHAPES} extra sizes")
    return n


def _evaluate_shapes(task, source: str, cfg, n: int):
    from ..evaluate import Evaluator
    from .shapes import ShapedEvaluator

    with Evaluator(cfg, workers=1) as ev:
        return ShapedEvaluator(ev, n).evaluate(task, source)


def timeout_config(timeout: float) -> dict:
    """``--timeout`` → the two EvalConfig limits it sets (both), validated."""
    if not timeout > 0:
        raise UsageError(f"--timeout {timeout:g}: give a number of seconds > 0")
    return {"compile_timeout_s": float(timeout), "run_timeout_s": float(timeout)}


def timeout_note(res, timeout: float) -> None:
    """A timed-out result names the limit the user set."""
    if res.error_kind == "timeout" and "--timeout" not in (res.error_msg or ""):
        res.error_msg = f"{res.error_msg} [--timeout {timeout:g} s: import/compile and run each]"


def register(app: typer.Typer) -> None:
    tasks_app = typer.Typer(help="List task suites and show a task's problem.", no_args_is_help=True)
    app.add_typer(tasks_app, name="tasks")

    @tasks_app.command("list")
    def tasks_list(
        suite: str = typer.Option("builtin", help="builtin | kernelbench:DIR | hf:NAME_OR_PATH"),
        level: Optional[int] = typer.Option(None, help="only this level (a level the suite lacks is an error)"),
        json_out: bool = typer.Option(False, "--json", help="print one JSON document"),
    ) -> None:
        """List the problems of a suite."""
        from ..tasks import load_suite, task_spec

        tasks = load_suite(suite, level=level)
        if json_out:
            counts: dict = {}
            for t in tasks:
                counts[t.level] = counts.get(t.level, 0) + 1
            print_json({"suite": suite, "count": len(tasks), "levels": {str(k): v for k, v in sorted(counts.items())},
                        "tasks": [{"name": t.name, "spec": task_spec(suite, t), "level": t.level, "problem_id": t.problem_id,
                                   "op_type": t.op_type, "path": t.path, "hash": t.hash} for t in tasks]})
            return
        from ..tables import Col, print_table

        # the whole loadable name: dvk eval/optimize/tasks show take it
        print_table([Col("task", whole=True), Col("level", 1), Col("op type", 2)],
                    [(task_spec(suite, t), t.level, t.op_type) for t in tasks], title=f"{suite}: {len(tasks)} tasks")

    @tasks_app.command("show")
    def tasks_show(
        name: str = typer.Argument(..., metavar="TASK", help="builtin:level1/3_Softmax, kernelbench:DIR:level1/19_ReLU, "
                                                             "hf:NAME:level1/19_ReLU, or a problem file"),
        json_out: bool = typer.Option(False, "--json", help="print one JSON document"),
    ) -> None:
        """Print a problem's source (stdout) and where it is (stderr): `dvk tasks show NAME > problem.py`."""
        from ..tasks import load_task

        t = load_task(name)
        if json_out:
            print_json({"name": t.name, "suite": t.suite, "level": t.level, "problem_id": t.problem_id,
                        "op_type": t.op_type, "path": t.path, "hash": t.hash, "source": t.source})
            return
        typer.echo(f"{t.name}: {t.path or t.suite}", err=True)
        typer.echo(t.source, nl=not t.source.endswith("\n"))

    @app.command("eval")
    def eval_cmd(
        ctx: typer.Context,
        problem: str = typer.Argument(..., metavar="PROBLEM", help=PROBLEM_HELP),
        candidate: Path = typer.Argument(..., help="candidate file (defines ModelNew)"),
        device: str = typer.Option("auto", help=DEVICE_HELP + " (eval.device)"),
        trials: int = typer.Option(5, help="correctness trials (eval.trials)"),
        atol: float = typer.Option(1e-2, help="absolute tolerance of the output comparison, allclose (eval.atol)"),
        rtol: float = typer.Option(1e-2, help="relative tolerance of the output comparison, allclose (eval.rtol)"),
        timeout: Optional[float] = typer.Option(None, help=TIMEOUT_HELP, show_default=False),
        shapes: int = typer.Option(0, "--shapes", help=SHAPES_HELP),
        json_out: bool = typer.Option(False, "--json", help="print the EvalResult as JSON"),
        config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP),
        overrides: Optional[list[str]] = typer.Argument(None, metavar="SECTION.KEY=VALUE", help=OVERRIDES_HELP),
    ) -> None:
        """Evaluate one candidate against one problem."""
        from ..evaluate import evaluate
        from ..tasks import check_problem_source, load_task

        check_shapes(shapes)
        cfg = _eval_config(ctx, config, overrides, "eval", timeout, device=(("eval.device",), device),
                           trials=(("eval.trials",), trials), atol=(("eval.atol",), atol),
                           rtol=(("eval.rtol",), rtol))
        task = load_task(problem)
        bad = check_problem_source(task.source)
        if bad:
            raise UsageError(f"{problem} is not a KernelBench problem: {bad}")
        source = read_text_file(candidate, "candidate file")  # missing, a folder, not UTF-8: bad input
        try:
            res = evaluate(task, source, cfg) if not shapes else _evaluate_shapes(task, source, cfg, shapes)
        except KeyboardInterrupt:
            raise Interrupted("no result (dvk eval writes no files)") from None
        if timeout is not None:
            timeout_note(res, timeout)
        if json_out:
            print_json(res.to_dict())
        else:
            _print_result(res)
        if res.stage == "problem":  # the problem is broken, not the candidate: bad input
            raise UsageError(f"the problem {problem} is broken (stage problem): {_last_line(res.error_msg)}")

    @app.command("bench")
    def bench_cmd(
        ctx: typer.Context,
        suite: str = typer.Option("builtin", help="builtin | kernelbench:DIR | hf:NAME"),
        candidates: str = typer.Option("reference", help="folder mirroring the suite (levelN/<id>_<Name>.py), 'reference', or 'self' (harness self-check: each problem's own Model as its candidate; never counted as a solution)"),
        device: str = typer.Option("auto", help=DEVICE_HELP + " (eval.device)"),
        workers: Optional[int] = typer.Option(None, help="workers (default: one per GPU, 2 on CPU); several on one GPU check side by side and take turns to time"),
        backend: str = typer.Option("local", help="local | ray"),
        level: Optional[int] = typer.Option(None, help="only this level (a level the suite lacks is an error)"),
        tasks: Optional[str] = typer.Option(None, "--tasks", help="only the tasks whose name matches one of these "
                                            "comma-separated shell patterns, e.g. 'level2/77_*,*Softmax*' (a pattern "
                                            "matching no task is an error)"),
        out: Optional[Path] = typer.Option(None, help="run directory, created with missing parent folders (default "
                                                      "runs/bench-<time>, runs/selfcheck-<time> with --candidates self); rerun with the same --out to resume: tasks "
                                                      "already in its results.jsonl are skipped"),
        timeout: Optional[float] = typer.Option(None, help=TIMEOUT_HELP, show_default=False),
        compile_baseline: bool = typer.Option(True, "--compile/--no-compile", help="also time torch.compile "
                                              "baselines (eval.baseline_compile)"),
        shapes: int = typer.Option(0, "--shapes", help=SHAPES_HELP),
        json_out: bool = typer.Option(False, "--json", help="print the summary as JSON"),
        retry_failed: bool = typer.Option(False, "--retry-failed", help="with an existing --out: evaluate again the "
                                          "tasks whose line is not correct (each new line replaces the old one)"),
        config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP),
        allow: Optional[list[str]] = typer.Option(None, "--allow-config-change", metavar="FIELD",
                                                  help=RERUN_ALLOW_HELP),
        overrides: Optional[list[str]] = typer.Argument(None, metavar="SECTION.KEY=VALUE", help=OVERRIDES_HELP),
    ) -> None:
        """Evaluate a folder of candidates against a suite; Fast_p per level.

        --candidates self checks the harness instead: each problem's own Model is judged as
        its candidate; it prints which problems finished and the spread of self-speedups.

        Ctrl-C stops at once (exit 130): finished tasks stay in RUN_DIR/results.jsonl, tasks
        in flight are not recorded, and a rerun with the same --out evaluates the rest."""
        from .bench import run_bench

        if backend not in ("local", "ray"):
            raise UsageError(f"--backend {backend!r}: use local or ray")
        check_shapes(shapes)
        cfg = _eval_config(ctx, config, overrides, "bench", timeout, device=(("eval.device",), device),
                           compile_baseline=(("eval.baseline_compile",), compile_baseline))
        run_bench(suite=suite, candidates=candidates, device=cfg.device, workers=workers,
                  backend=backend, level=level, out=out, json_out=json_out, cfg=cfg, retry_failed=retry_failed,
                  patterns=tasks, allow=tuple(allow or ()), shapes=shapes)


def _eval_config(ctx, config: Optional[str], overrides: Optional[list[str]], command: str,
                 timeout: Optional[float], **flags):
    """The EvalConfig of ``dvk eval``/``bench``: --config, overrides, then the flags given."""
    from ..cliconfig import command_config

    if timeout is not None:
        timeout_config(timeout)  # > 0, named as the flag
        flags["timeout"] = (("eval.compile_timeout_s", "eval.run_timeout_s"), float(timeout))
    cfg = command_config(ctx, config, overrides, flags, ("eval",), command).eval
    _check_device(cfg.device)
    return cfg


def _last_line(text) -> str:
    lines = [x for x in str(text or "").strip().splitlines() if x.strip()]
    return lines[-1].strip()[:300] if lines else "its Model or inputs failed"


def _check_device(device: str) -> str:
    if device in ("auto", "cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit()):
        return device
    raise UsageError(f"--device {device!r}: use cpu, cuda or cuda:N")


def _print_result(res) -> None:
    from rich.console import Console

    con = Console()
    verdict = "[green]correct[/]" if res.correct else "[red]incorrect[/]"
    con.print(f"{res.task}: {verdict}  stage={res.stage}  backend={res.backend}  device={res.device}")
    if res.flags:
        con.print(f"flags: [yellow]{', '.join(res.flags)}[/]")
    con.print(res.feedback, markup=False, highlight=False)
    sh = res.timing_detail.get("shapes")
    if isinstance(sh, dict):
        for row in sh["sizes"]:
            sizes = "task size" if row["sizes"] == "task" else ", ".join(f"{k}={v}" for k, v in row["sizes"].items())
            got = "correct" if row["correct"] else f"incorrect ({row['error_kind']})"
            sp = f", speedup {row['speedup']:.3f}x" if row["speedup"] is not None else ""
            con.print(f"  at {sizes}: {got}{sp}", markup=False, highlight=False)
        fast = ", ".join(f"{k} {v:.0%}" for k, v in sh.items() if k.startswith("fast_") and v is not None)
        gm = f"{sh['geomean']:.3f}x" if sh.get("geomean") else "n/a"
        con.print(f"over {len(sh['sizes'])} sizes: geomean {gm}; {fast}", markup=False, highlight=False)
