"""Fast_p tables on the terminal, shared by `dvk bench`, `dvk run` and `dvk report`.

Covers: rendering one ``fastp_table()`` result as a rich table (levels as rows; correct,
Fast_p columns, ``n/a`` where timing was unavailable, geometric-mean speedups vs eager and
vs torch.compile). Does not cover:
computing the numbers (fastp.py) or the HTML page (page.py).
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
