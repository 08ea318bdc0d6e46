"""Fast_p tables on the terminal, shared by `dvk bench`, `dvk run` and `dvk report`.

Covers: rendering one ``fastp_table()`` result as a rich table (levels as rows; correct,
Fast_p columns, ``n/a`` where timing was unavailable, geometric-mean speedups vs eager and
vs torch.compile), and a comparison of runs (``compare_rich_table``: per level a row per
run and a row per difference to the first run). Does not cover: computing the numbers
(fastp.py, compare.py) or the HTML pages (page.py, compare_page.py).
"""

from __future__ import annotations

from .fastp import DEFAULT_PS
from .page import fmt_fastp, fmt_x, with_ci


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
        ci = row.get("ci") or {}
        t.add_row(str(lvl) if lvl else "?", str(row["n"]),
                  *[with_ci(fmt_fastp(row[f"fast_{p:g}"]), ci.get(f"fast_{p:g}"), percent=True, sep="\n")
                    for p in ps],
                  with_ci(fmt_x(row.get("geomean")), ci.get("geomean"), sep="\n"), fmt_x(row.get("geomean_compile")))
    if any(row.get("ci") for row in table.values()):
        t.caption = "\\[low–high]: 95 % bootstrap interval over tasks"
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


def paired_lines(comp, i: int, pd) -> list[str]:
    """The paired bootstrap of run ``i`` against the first (``compare.paired``), one line per
    figure: the difference, its 95 % interval and whether it is significant."""
    a, b = comp.labels[0], comp.labels[i]
    if not pd:
        return [f"{b} − {a}: no task in both runs, no paired test"]
    out = [f"{b} − {a}, paired bootstrap over the {pd['tasks']} tasks both runs hold (95 % intervals):"]
    for p in comp.ps:
        d = pd.get(f"fast_{p:g}")
        name = "correct" if p == 0 else f"fast_{p:g}"
        if d is None:
            out.append(f"  {name}: n/a (not timed in both runs)")
            continue
        lo, hi = d["ci"]
        verdict = "significant" if d["significant"] else "not significant"
        out.append(f"  {name}: {100 * d['diff']:+.1f} pp [{100 * lo:+.1f}, {100 * hi:+.1f}] {verdict}")
    g = pd.get("geomean")
    if g:
        verdict = "significant" if g["significant"] else "not significant"
        out.append(f"  geomean: {g['ratio']:.3f}× [{g['ci'][0]:.3f}, {g['ci'][1]:.3f}] {verdict}")
    return out
