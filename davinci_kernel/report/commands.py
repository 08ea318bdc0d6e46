"""`dvk report RUN_DIR`: write the run's HTML page and figures, print its Fast_p table.

Covers: the command's arguments, output on the terminal (a rich table per result group,
or one JSON document with ``--json``) and the mapping of bad input to UsageError
(exit 2). Does not cover reading the run or rendering (build.py and its helpers).
"""

from __future__ import annotations

import sys

import typer


def _rich_table(name: str, table: dict, ps):
    from rich import box
    from rich.table import Table

    from .page import fmt_pct, fmt_x

    t = Table(title=f"Fast_p — {name} results" if name else "Fast_p", box=box.SIMPLE_HEAD)
    t.add_column("level", no_wrap=True)
    t.add_column("n", justify="right")
    for p in ps:
        t.add_column(f"Fast_{p:g}", justify="right")
    t.add_column("geomean\nvs eager", justify="right")
    t.add_column("geomean\nvs compile", justify="right")
    for lvl, row in table.items():
        t.add_row(str(lvl) if lvl else "?", str(row["n"]), *[fmt_pct(row[f"fast_{p:g}"]) for p in ps],
                  fmt_x(row["geomean"]), fmt_x(row["geomean_compile"]))
    return t


def report(
    run_dir: str = typer.Argument(..., help="run directory written by dvk bench / run / train"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON document (paths and Fast_p tables)"),
) -> None:
    """Write RUN_DIR/report.html (one self-contained page) and the PNG figures."""
    from .build import write_report
    from .fastp import DEFAULT_PS
    from .rundir import load_run

    rep = write_report(load_run(run_dir))
    if json_out:
        from ..cli import print_json

        print_json({
            "report": str(rep.html),
            "figures": {k: str(v) for k, v in rep.figures.items()},
            "fastp": {name: {str(lvl): row for lvl, row in table.items()}
                      for name, table in rep.tables.items()},
            "notes": rep.run.notes,
        })
        return
    from rich.console import Console

    for note in rep.run.notes:
        typer.echo(f"note: {note}", err=True)
    console = Console()
    if not console.is_terminal:  # logs and pipes: room for the whole table
        console = Console(width=120)
    for name, table in rep.tables.items():
        console.print(_rich_table(name, table, DEFAULT_PS))
    if not rep.tables:
        console.print("no evaluation results in this run (no results.jsonl lines)")
    figs = ", ".join(p.name for p in rep.figures.values()) or "none"
    console.print(f"wrote {rep.html} (figures: {figs})", highlight=False, soft_wrap=True)
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.command("report")(report)
