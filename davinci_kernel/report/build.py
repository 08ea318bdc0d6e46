"""``build_report(run_dir)``: read a RUN_DIR, write ``report.html`` and the PNG figures.

Covers: putting rundata (input), fastp (metrics), plots (figures) and page (HTML) together
and writing every output atomically (``files.write_atomic``).
Figures: ``fastp.png``, ``speedups.png``, ``roofline.png``, ``training.png``, each written only when there
is data for it. Several runs compared (``write_comparison``): ``compare.html`` and
``compare.png`` in an output folder. Does not cover the command line (commands.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import UsageError
from ..files import write_atomic
from . import plots
from .compare import Comparison
from .fastp import DEFAULT_PS, fastp_table, split_broken
from .page import render_page
from .rundata import RunData, load_run

REPORT_FILE = "report.html"
COMPARE_FILE = "compare.html"
COMPARE_FIGURE = "compare.png"


@dataclass
class Report:
    """What a build wrote, with the Fast_p tables it showed."""

    run: RunData
    html: Path
    figures: dict[str, Path] = field(default_factory=dict)
    tables: dict[str, dict] = field(default_factory=dict)


def tables_for(run: RunData, ps=DEFAULT_PS) -> dict[str, dict]:
    """Fast_p table of each result group (``run.totals`` counts missing tasks as unsolved; a
    broken problem, stage ``problem``, is left out of the denominator and named in a note)."""
    out = {}
    for name, rows in run.groups.items():
        if not rows:
            continue
        totals = run.totals
        if totals:
            counts: dict[int, int] = {}
            for r in rows:
                counts[r["level"]] = counts.get(r["level"], 0) + 1
            if any(totals.get(lvl, -1) < c for lvl, c in counts.items()):
                note = (f"run.json totals {totals} do not cover the results "
                        f"{counts}; shares are over the results present")
                if note not in run.notes:
                    run.notes.append(note)
                totals = None
        rows, totals, broken = split_broken(rows, totals)  # a broken problem: out of the denominator, named
        for task in sorted({r["task"] for r in broken}):
            note = f"broken problem (not counted in Fast_p): {task}"
            if note not in run.notes:
                run.notes.append(note)
        out[name] = fastp_table(rows, ps, totals=totals)
    return out


def write_report(run: RunData, ps=DEFAULT_PS) -> Report:
    """Render ``run`` into RUN_DIR/report.html plus its figures."""
    tables = tables_for(run, ps)
    primary: Optional[list] = run.groups.get(run.primary_group) if run.groups else None
    figures = {
        "fastp": plots.fastp_figure(tables, ps) if tables else None,
        "speedups": plots.speedup_figure(primary) if primary else None,
        "roofline": plots.roofline_figure(primary) if primary else None,
        "training": plots.training_figure(run.metrics, run.skills),
    }
    report = Report(run=run, html=run.path / REPORT_FILE, tables=tables)
    for name, png in figures.items():
        path = run.path / f"{name}.png"
        if png:
            write_atomic(path, png)
            report.figures[name] = path
        elif path.is_file():  # left by an earlier report of this run; no longer true
            path.unlink()
    write_atomic(report.html, render_page(run, tables, ps, figures))
    return report


def build_report(run_dir) -> Path:
    """Write RUN_DIR/report.html (and PNG figures); return the page's path."""
    return write_report(load_run(run_dir)).html


@dataclass
class ComparisonReport:
    """What a comparison wrote."""

    comparison: Comparison
    html: Path
    figure: Path


def write_comparison(comp: Comparison, out_dir: Path) -> ComparisonReport:
    """Render ``comp`` into OUT_DIR/compare.html plus compare.png (the folder is created)."""
    from .compare_page import render_compare_page

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {out_dir}: {e.strerror or e}") from None
    names = [f"{lab}: {run.path.name}" for lab, run in zip(comp.labels, comp.runs)]
    png = plots.compare_figure(comp.tables, names, comp.ps)
    rep = ComparisonReport(comparison=comp, html=out_dir / COMPARE_FILE, figure=out_dir / COMPARE_FIGURE)
    write_atomic(rep.figure, png)
    write_atomic(rep.html, render_compare_page(comp, out_dir.resolve(), png))
    return rep
