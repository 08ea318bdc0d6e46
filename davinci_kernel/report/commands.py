"""`dvk report RUN_DIR [RUN_DIR...]`: one run's HTML page and figures, or several runs compared.

Covers: the command's arguments, output on the terminal (a rich table per result group,
or one JSON document with ``--json``) and the mapping of bad input to UsageError
(exit 2). One run: RUN_DIR/report.html and PNGs, as always. Several: Fast_p at the last
and best turn per level side by side with the differences to the first run, on the
terminal and in OUT/compare.html + compare.png (``--out``; default a ``compare-A-vs-B``
folder next to the first run). Training runs (metrics, no results) are compared by their
reward and Fast_p curves and their config difference (``compare_training``). Does not cover reading runs or rendering (build.py,
compare.py and their helpers).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Optional

import typer

from ..files import print_json


def report(
    run_dirs: list[str] = typer.Argument(..., help="run directory written by dvk bench / run / train; several: "
                                                   "compare them (the first is A, the baseline of B − A)",
                                         metavar="RUN_DIR"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON document (paths and Fast_p tables)"),
    out: Optional[Path] = typer.Option(None, "--out", help="with several runs: the folder for compare.html and "
                                                          "compare.png (default: compare-<A>-vs-<B> next to the "
                                                          "first run)"),
) -> None:
    """Write RUN_DIR/report.html (one self-contained page) and the PNG figures; with several
    runs, one page comparing their Fast_p at the last and best turn per level, with the
    differences to the first run."""
    if len(run_dirs) > 1:
        _compare(run_dirs, json_out, out)
        return
    if out is not None:
        from ..errors import UsageError

        raise UsageError("--out is for comparing several runs; one run's report is written into its RUN_DIR")
    run_dir = run_dirs[0]
    from .build import write_report
    from .fastp import DEFAULT_PS
    from .rundata import load_run
    from .terminal import fastp_rich_table

    rep = write_report(load_run(run_dir))
    if json_out:
        print_json({
            "report": str(rep.html),
            "figures": {k: str(v) for k, v in rep.figures.items()},
            "fastp": {name: {str(lvl): row for lvl, row in table.items()}
                      for name, table in rep.tables.items()},
            "notes": rep.run.notes,
            "provenance": rep.run.meta.get("provenance"),
        })
        return
    from rich.console import Console

    for note in rep.run.notes:
        typer.echo(f"note: {note}", err=True)
    console = Console()
    if not console.is_terminal:  # logs and pipes: room for the whole table
        console = Console(width=120)
    for name, table in rep.tables.items():
        console.print(fastp_rich_table(table, f"Fast_p — {name} results" if name else "Fast_p", DEFAULT_PS))
    if not rep.tables and rep.run.metrics:  # a training run: its curves are in the figure
        last = rep.run.metrics[-1]
        shown = ", ".join(f"{k} {last[k]:.3f}" for k in sorted(last) if k.startswith(("reward/", "fast_"))
                          and isinstance(last[k], (int, float)))
        console.print(f"a training run: {len(rep.run.metrics)} steps in metrics.jsonl; at step {last.get('step')}: "
                      f"{shown or 'no reward logged'}", highlight=False, soft_wrap=True)
    elif not rep.tables:
        console.print("no evaluation results in this run (no results.jsonl lines)")
    prov = rep.run.meta.get("provenance")
    if isinstance(prov, dict):
        from ..provenance import summary

        console.print(f"ran on: {summary(prov)}", highlight=False, soft_wrap=True)
    else:
        console.print("ran on: not recorded (run.json has no provenance)", highlight=False)
    figs = ", ".join(p.name for p in rep.figures.values()) or "none"
    console.print(f"wrote {rep.html} (figures: {figs})", highlight=False, soft_wrap=True)
    sys.stdout.flush()


def _default_out(run_dirs: list[str]) -> Path:
    names = [re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(p).expanduser().resolve().name) for p in run_dirs]
    name = "compare-" + "-vs-".join(names)
    if len(name) > 100:
        name = name[:100].rstrip("-_.")
    return Path(run_dirs[0]).expanduser().resolve().parent / name


def _compare(run_dirs: list[str], json_out: bool, out: Optional[Path]) -> None:
    from ..errors import check_out_dir
    from .build import write_comparison
    from .compare import compare_runs, load_runs, run_summary

    target = check_out_dir(out) if out is not None else None  # before any run is read
    from .compare_training import is_training

    runs = load_runs(run_dirs)
    if any(is_training(r) for r in runs):  # training runs: reward and Fast_p curves, config difference
        _compare_training(runs, json_out, target if target is not None else _default_out(run_dirs))
        return
    comp = compare_runs(runs)
    rep = write_comparison(comp, target if target is not None else _default_out(run_dirs))
    if json_out:
        print_json({
            "report": str(rep.html),
            "figures": {"compare": str(rep.figure)},
            "runs": [{"label": lab, "path": str(run.path), "meta": run.meta}
                     for lab, run in zip(comp.labels, comp.runs)],
            "levels": comp.levels,
            "fastp": {g: {lab: {str(lvl): row for lvl, row in t.items()} for lab, t in zip(comp.labels, tables)}
                      for g, tables in comp.tables.items()},
            "diff": {g: {comp.diff_label(i): {str(lvl): row for lvl, row in d.items()}
                         for i, d in enumerate(diffs, 1)} for g, diffs in comp.diffs.items()},
            "paired": {g: {comp.diff_label(i): pd for i, pd in enumerate(pds, 1)} for g, pds in comp.paired.items()},
            "notes": comp.notes,
        })
        return
    from rich.console import Console

    from .terminal import compare_rich_table, paired_lines

    for note in comp.notes:
        typer.echo(f"note: {note}", err=True)
    console = Console()
    if not console.is_terminal:
        console = Console(width=140)
    for lab, run in zip(comp.labels, comp.runs):
        console.print(f"{lab} = {run.path}  ({run_summary(run)})", highlight=False, soft_wrap=True)
    for group in comp.tables:
        console.print(compare_rich_table(comp, group))
        for i, pd in enumerate(comp.paired.get(group, []), 1):
            for line in paired_lines(comp, i, pd):
                console.print(f"{group} turn: {line}", highlight=False, soft_wrap=True)
    console.print(f"wrote {rep.html} (figure: {rep.figure.name})", highlight=False, soft_wrap=True)
    sys.stdout.flush()


def _compare_training(runs: list, json_out: bool, out: Path) -> None:
    from . import compare_training as ct

    comp = ct.compare_training(runs)
    html, fig = ct.write_training_comparison(comp, out)
    if json_out:
        print_json(ct.to_json(comp, html, fig))
        return
    for line in ct.lines(comp):
        typer.echo(line)
    typer.echo(f"wrote {html}" + (f" (figure: {fig.name})" if fig else ""))


def register(app: typer.Typer) -> None:
    app.command("report")(report)
