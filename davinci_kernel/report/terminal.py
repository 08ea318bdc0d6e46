"""Fast_p tables on the terminal, shared by `dvk bench`, `dvk run` and `dvk report`.

Covers: rendering one ``fastp_table()`` result as a rich table (levels as rows; correct,
Fast_p columns, ``n/a`` where timing was unavailable, geometric-mean speedups vs eager and
vs torch.compile), and a comparison of runs (``compare_rich_table``: per level a row per
run and a row per difference to the first run). Does not cover: computing the numbers
(fastp.py, compare.py) or the HTML pages (page.py, compare_page.py).
"""

from __future__ import annotations

from .fastp import DEFAULT_PS
from .page import fmt_fastp, fmt_x


def fastp_rich_table(table: dict, title: str = "Fast_p", ps=DEFAULT_PS):
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD)
    t.add_column("level", no_wrap=True)
    t.add_column("n", justify="right")
    for p in ps:
        t.add_column("correct" if p == 0 else f"fast_{p:g}", justify="right")
    t.add_column("geomean\nvs eager", justify="right")
    t.add_column("geomean\nvs compile", justify="right")
    for lvl, row in table.items():
        t.add_row(str(lvl) if lvl else "?", str(row["n"]), *[fmt_fastp(row[f"fast_{p:g}"]) for p in ps],
                  fmt_x(row.get("geomean")), fmt_x(row.get("geomean_compile")))
    return t


def compare_rich_table(comp, group: str):
    """One table of a ``Comparison`` result group: per level, a row per run (A, B, ...) and a
    row per difference to the first run (B − A, in percentage points and ×)."""
    from rich import box
    from rich.table import Table

    from .compare_page import fmt_dpp, fmt_dx

    t = Table(title=f"Fast_p — {group} turn, side by side (B − A: difference to run A)", box=box.SIMPLE_HEAD)
    t.add_column("level", no_wrap=True)
    t.add_column("run", no_wrap=True)
    t.add_column("n", justify="right")
    for p in comp.ps:
        t.add_column("correct" if p == 0 else f"fast_{p:g}", justify="right")
    t.add_column("geomean\nvs eager", justify="right")
    t.add_column("geomean\nvs compile", justify="right")
    tables, diffs = comp.tables[group], comp.diffs[group]
    levels = list(tables[0])
    for lvl in levels:
        for i, (label, table) in enumerate(zip(comp.labels, tables)):
            row = table[lvl]
            t.add_row(str(lvl) if i == 0 else "", label, str(row["n"]),
                      *[fmt_fastp(row[f"fast_{p:g}"]) for p in comp.ps],
                      fmt_x(row.get("geomean")), fmt_x(row.get("geomean_compile")))
        for i, diff in enumerate(diffs, 1):
            d = diff[lvl]
            t.add_row("", f"{comp.labels[i]} − {comp.labels[0]}", "",
                      *[fmt_dpp(d[f"fast_{p:g}"]) for p in comp.ps],
                      fmt_dx(d.get("geomean")), fmt_dx(d.get("geomean_compile")),
                      style="bold", end_section=lvl != levels[-1] and i == len(diffs))
    return t
