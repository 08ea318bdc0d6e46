"""Fast_p and geometric-mean speedups over a set of evaluation results.

Covers: the KernelBench metrics, computed from ``EvalResult`` records (or their dicts).
Fast_p = share of tasks whose candidate is correct and faster than eager by more than p
(p = 0 is plain correctness). A missing result counts as unsolved. Where correct results
exist but none of them was timed (CPU runs: timing needs a GPU), Fast_p for p > 0 is
unknown, not 0: the table holds None there (``n/a`` on screen, ``null`` in JSON) and
``untimed`` counts the correct results without a speedup. Each row's ``ci`` holds the 95 %
bootstrap intervals over tasks of its Fast_p values and geometric mean
(``intervals.suite_ci``: tasks resampled, each task's speedup redrawn within its own
``speedup_ci``). Does not cover plots.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Optional

from ..intervals import log_sd, suite_ci

DEFAULT_PS = (0.0, 1.0, 1.2, 1.5, 2.0)


def _get(r, key):
    return r.get(key) if isinstance(r, dict) else getattr(r, key, None)


def level_of(r) -> int:
    lvl = _get(r, "level")
    if lvl:
        return int(lvl)
    name = _get(r, "task") or ""
    if name.startswith("level") and "/" in name:
        try:
            return int(name.split("/", 1)[0][5:])
        except ValueError:
            return 0
    return 0


def fast_p(results: Iterable, p: float, total: Optional[int] = None) -> float:
    """Share of results (or of ``total`` tasks) that are correct with speedup > p."""
    rs = list(results)
    n = total if total is not None else len(rs)
    if n == 0:
        return 0.0
    hits = 0
    for r in rs:
        if not _get(r, "correct"):
            continue
        if p <= 0:
            hits += 1
            continue
        s = _get(r, "speedup")
        if s is not None and s > p:
            hits += 1
    return hits / n


def geomean(values: Iterable[float]) -> Optional[float]:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def split_broken(rows: list, totals: Optional[dict] = None) -> tuple[list, Optional[dict], list]:
    """(the results of working problems, ``totals`` less the broken problems per level, the
    broken problems' results): a result at stage ``problem`` (its Model, get_inputs or
    get_init_inputs raised) is the problem's fault, not the candidate's, so it is kept out of
    Fast_p's denominator and named instead."""
    broken = sorted((r for r in rows if _get(r, "stage") == "problem"), key=lambda r: str(_get(r, "task")))
    if not broken:
        return rows, totals, []
    names = {_get(r, "task") for r in broken}
    if totals is not None:
        totals = dict(totals)
        for name in names:
            lvl = next(level_of(r) for r in broken if _get(r, "task") == name)
            if lvl in totals:
                totals[lvl] -= 1
    return [r for r in rows if _get(r, "stage") != "problem"], totals, broken


def timing_unavailable(table: dict) -> bool:
    """True when some Fast_p (p > 0) of the table is unknown because nothing correct was timed."""
    return any(v is None for row in table.values() for k, v in row.items() if k.startswith("fast_"))


NA_NOTE = ("n/a: timing unavailable (CPU runs check correctness only; Fast_p for p > 0 needs a GPU, "
           "--device cuda)")


def fastp_table(results: Iterable, ps=DEFAULT_PS, totals: Optional[dict[int, int]] = None) -> dict:
    """{level: {"n": tasks, "fast_<p>": share, "geomean": x, "geomean_compile": x}} plus "all".

    ``fast_<p>`` for p > 0 is None when the group has correct results and none of them has
    a speedup (not timed), and ``untimed`` says how many correct results lack one."""
    by_level: dict = defaultdict(list)
    rs = list(results)
    for r in rs:
        by_level[level_of(r)].append(r)
    table = {}
    groups = [(lvl, by_level[lvl]) for lvl in sorted(by_level)] + [("all", rs)]
    for lvl, group in groups:
        n = (totals or {}).get(lvl) if lvl != "all" else (sum(totals.values()) if totals else None)
        row = {"n": n if n is not None else len(group)}
        correct = [r for r in group if _get(r, "correct")]
        untimed = sum(1 for r in correct if _get(r, "speedup") is None)
        unknown = bool(correct) and untimed == len(correct)
        for p in ps:
            row[f"fast_{p:g}"] = None if (p > 0 and unknown) else fast_p(group, p, total=row["n"])
        row["untimed"] = untimed
        row["geomean"] = geomean(_get(r, "speedup") for r in correct)
        row["geomean_compile"] = geomean(_get(r, "speedup_compile") for r in correct)
        speedups, ok, sds = suite_inputs(group)
        row["ci"] = suite_ci(speedups, ok, ps, sds=sds, total=row["n"])
        table[lvl] = row
    return table


def suite_inputs(results: Iterable) -> tuple[list, list, list]:
    """(speedups, correct, log-scale sds from each ``speedup_ci``) of results, as
    ``intervals.suite_ci`` and ``intervals.paired_diff`` take them, in the order of the tasks'
    names (the same results in any order give the same seeded interval)."""
    rs = sorted(results, key=lambda r: str(_get(r, "task") or ""))
    return ([_get(r, "speedup") for r in rs], [bool(_get(r, "correct")) for r in rs],
            [log_sd(_get(r, "speedup_ci")) for r in rs])
