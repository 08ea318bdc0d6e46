"""`dvk report RUN_DIR`: write the run's HTML page and figures, print its Fast_p table.

Covers: the command's arguments, output on the terminal (a rich table per result group,
or one JSON document with ``--json``) and the mapping of bad input to UsageError
(exit 2). Does not cover reading the run or rendering (build.py and its helpers).
"""

from __future__ import annotations

import sys

import typer


def report(
    run_dir: str = typer.Argument(..., help="run directory written by dvk bench / run / train"),
    json_out: bool = typer.Option(False, "--json", help="print one JSON document (paths and Fast_p tables)"),
) -> None:
    """Write RUN_DIR/report.html (one self-contained page) and the PNG figures."""
    from .build import write_report
    from .fastp import DEFAULT_PS
    from .rundir import load_run
    from .terminal import fastp_rich_table

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
        console.print(fastp_rich_table(table, f"Fast_p — {name} results" if name else "Fast_p", DEFAULT_PS))
    if not rep.tables:
        console.print("no evaluation results in this run (no results.jsonl lines)")
    figs = ", ".join(p.name for p in rep.figures.values()) or "none"
    console.print(f"wrote {rep.html} (figures: {figs})", highlight=False, soft_wrap=True)
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.command("report")(report)
