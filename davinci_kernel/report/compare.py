"""Comparing runs: Fast_p of several run directories side by side, with the differences.

Covers: reading RUN_A, RUN_B, ... (each through ``load_run``), refusing what cannot be
compared (a directory given twice, a run without evaluation results, a harness
self-check, runs of different suites, runs that share no level) with one ``UsageError``
line, and computing per result group (``last`` and ``best`` turn; a run with one unmarked
group, such as ``dvk bench``, counts it as both) one Fast_p table per run over the levels
all runs have, plus the differences of every later run to the first (B − A, C − A: shares
in fractions, geometric means in ×), and per later run a paired bootstrap against the first
over the tasks both hold (``paired``: per p the difference, its 95 % interval and whether it
excludes 0; the geometric-mean ratio likewise). Does not cover rendering (compare_page.py,
terminal.py) or writing files (build.py).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import UsageError
from ..intervals import paired_diff
from ..tasks import suite_id
from .fastp import DEFAULT_PS, fastp_table, suite_inputs
from .rundata import SELF_CHECK_GROUP, RunData, load_run

COMPARED_GROUPS = ("last", "best")
GEOMEAN_KEYS = ("geomean", "geomean_compile")
LABELS = string.ascii_uppercase


@dataclass
class Comparison:
    """What the comparison page and table show."""

    runs: list[RunData]
    labels: list[str]  # "A", "B", ...
    ps: tuple = DEFAULT_PS
    levels: list[int] = field(default_factory=list)  # the levels every run has
    tables: dict[str, list[dict]] = field(default_factory=dict)  # group → one fastp_table per run
    diffs: dict[str, list[dict]] = field(default_factory=dict)  # group → (run i − run 0) for i ≥ 1
    paired: dict[str, list[Optional[dict]]] = field(default_factory=dict)  # group → paired bootstrap, run i vs run 0
    notes: list[str] = field(default_factory=list)

    def diff_label(self, i: int) -> str:
        """``B-A`` for the difference of run ``i`` (≥ 1) to the first (ASCII, for JSON keys)."""
        return f"{self.labels[i]}-{self.labels[0]}"

    def fastp_keys(self) -> list[str]:
        return [f"fast_{p:g}" for p in self.ps]


def load_runs(paths: list[str]) -> list[RunData]:
    """Each RUN_DIR read and checked for comparing; UsageError on the first that cannot be."""
    if len(paths) > len(LABELS):
        raise UsageError(f"dvk report compares at most {len(LABELS)} runs, not {len(paths)}")
    runs: list[RunData] = []
    seen: dict[Path, str] = {}
    for p in paths:
        run = load_run(p)
        if run.path in seen:
            raise UsageError(f"run directory given twice: {p} (also as {seen[run.path]})")
        seen[run.path] = p
        if SELF_CHECK_GROUP in run.groups:
            raise UsageError(f"{run.path} holds harness self-check results (each problem's own Model), "
                             "not solutions: it cannot be compared")
        if not run.has_results and not run.metrics:
            raise UsageError(f"{run.path} has no evaluation results (results.jsonl) to compare; "
                             "compare runs of dvk run, dvk bench or dvk train")
        runs.append(run)
    if any(r.metrics and not r.has_results for r in runs):
        return runs  # training runs: compare_training checks them
    # one spelling per suite (an older run.json may hold the suite as it was typed)
    suites = {suite_id(str(r.meta["suite"])) for r in runs if r.meta.get("suite")}
    if len(suites) > 1:
        which = ", ".join(f"{r.path.name}: {r.meta.get('suite', '?')}" for r in runs)
        raise UsageError(f"runs of different suites cannot be compared ({which})")
    return runs


def _group_rows(run: RunData, group: str) -> Optional[list[dict]]:
    if group in run.groups:
        return run.groups[group]
    if set(run.groups) == {""}:  # one result per task (dvk bench): both the last and the best turn
        return run.groups[""]
    return None


def _run_levels(run: RunData) -> set[int]:
    levels = {r["level"] for rows in run.groups.values() for r in rows}
    return levels | set(run.totals or {})


def _totals(run: RunData, rows: list[dict], levels: list[int], notes: list[str], label: str) -> Optional[dict]:
    """run.totals restricted to ``levels``; None (shares over the results present) when it
    does not cover the results, as the single-run report does."""
    if not run.totals:
        return None
    totals = {lvl: n for lvl, n in run.totals.items() if lvl in levels}
    counts: dict[int, int] = {}
    for r in rows:
        counts[r["level"]] = counts.get(r["level"], 0) + 1
    if any(totals.get(lvl, -1) < c for lvl, c in counts.items()):
        note = (f"run {label}: run.json totals {run.totals} do not cover the results; "
                "shares are over the results present")
        if note not in notes:
            notes.append(note)
        return None
    return totals


def _diff(a: dict, b: dict, keys: list[str]) -> dict:
    """{level: {key: b − a}} for the levels of ``a``; None where either side is unknown."""
    out = {}
    for lvl, row_a in a.items():
        row_b = b.get(lvl, {})
        out[lvl] = {k: (None if row_a.get(k) is None or row_b.get(k) is None else row_b[k] - row_a[k])
                    for k in keys}
    return out


def compare_runs(runs: list[RunData], ps=DEFAULT_PS) -> Comparison:
    """Fast_p per run and the differences to the first run, over the levels all runs share."""
    comp = Comparison(runs=runs, labels=list(LABELS[: len(runs)]), ps=tuple(ps))
    per_run = [_run_levels(r) for r in runs]
    common = sorted(set.intersection(*per_run))
    if not common:
        raise UsageError("the runs share no level: " + "; ".join(
            f"{r.path.name}: {', '.join(map(str, sorted(lv))) or 'none'}" for r, lv in zip(runs, per_run)))
    comp.levels = common
    for label, run, lv in zip(comp.labels, runs, per_run):
        extra = sorted(lv - set(common))
        if extra:
            comp.notes.append(f"run {label} ({run.path.name}) also has level(s) {', '.join(map(str, extra))}, "
                              "left out: only the levels every run has are compared")
    keys = comp.fastp_keys() + list(GEOMEAN_KEYS)
    for group in COMPARED_GROUPS:
        rows_per_run = [_group_rows(r, group) for r in runs]
        missing = [comp.labels[i] for i, rows in enumerate(rows_per_run) if rows is None]
        if missing:
            comp.notes.append(f"no {group}-turn results in run(s) {', '.join(missing)}: "
                              f"{group} turn not compared")
            continue
        tables = []
        for label, run, rows in zip(comp.labels, runs, rows_per_run):
            rows = [r for r in rows if r["level"] in common]
            tables.append(fastp_table(rows, ps, totals=_totals(run, rows, common, comp.notes, label)))
        comp.tables[group] = tables
        comp.diffs[group] = [_diff(tables[0], t, keys) for t in tables[1:]]
        comp.paired[group] = [paired(rows_per_run[0], rows, ps) for rows in rows_per_run[1:]]
        for lvl in list(common) + ["all"]:
            ns = [t.get(lvl, {}).get("n") for t in tables]
            if len(set(ns)) > 1:
                note = (f"level {lvl}: the runs cover different numbers of tasks "
                        f"({', '.join(f'{lab} {n}' for lab, n in zip(comp.labels, ns))}); "
                        "each share is over its own run's tasks")
                if note not in comp.notes:
                    comp.notes.append(note)
    if not comp.tables:
        raise UsageError("no result group (last or best turn) is present in every run: nothing to compare")
    for label, run in zip(comp.labels, runs):
        comp.notes.extend(f"run {label}: {n}" for n in run.notes)
    return comp


def paired(rows_a: list[dict], rows_b: list[dict], ps=DEFAULT_PS) -> Optional[dict]:
    """``intervals.paired_diff`` of run B against run A over the tasks both hold a result
    for (by name, all levels), with the tasks' count; None when they share no task."""
    a = {r["task"]: r for r in rows_a}
    b = {r["task"]: r for r in rows_b}
    shared = sorted(set(a) & set(b))
    if not shared:
        return None
    return {**paired_diff(suite_inputs(a[t] for t in shared), suite_inputs(b[t] for t in shared), ps),
            "tasks": len(shared)}


def load_comparison(paths: list[str], ps=DEFAULT_PS) -> Comparison:
    return compare_runs(load_runs(paths), ps)


def run_summary(run: RunData) -> str:
    """One line of what a run is: its settings from run.json (model, skills, select, library)."""
    m = run.meta
    parts = []
    for key in ("kind", "model", "suite", "skills", "select", "turns", "device"):
        if m.get(key) not in (None, ""):
            parts.append(f"{key} {m[key]}")
    lib = m.get("library")
    if isinstance(lib, dict) and "skills" in lib:
        parts.append(f"library {lib['skills']} skills")
    served = m.get("server_model")
    if isinstance(served, dict) and served.get("root"):
        parts.append(f"served {served['root']}")
    prov = m.get("provenance")
    if isinstance(prov, dict):  # what it ran on, so runs from different machines are told apart
        parts.append(f"dvk {prov.get('davinci_kernel')}, torch {prov.get('torch')}, GPU {prov.get('gpu') or 'none'}")
    return ", ".join(str(p) for p in parts) or "no run.json"
