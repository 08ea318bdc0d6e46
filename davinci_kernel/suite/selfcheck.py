"""The harness self-check's verdicts: which problems finished, why the others did not, and the
spread of self-speedups (`dvk bench --candidates self`, bench/kernelbench_selfcheck.py).

A self-check result is the problem's own ``Model`` judged as its candidate
(``EvalConfig.self_check``); identical code must come back correct with a speedup of 1.00.
A problem *finished* when every stage ran and the self-verdict is correct: loaded, checked
and, on a GPU, timed (on the CPU timing is unavailable, so checked is the last stage). A
reference that mutates its inputs or is not deterministic is named in ``notes`` (from the
result's flags, warnings and error). Covers: those rules over result dicts (results.jsonl
lines), the summary dict and its terminal rendering. Does not cover running anything.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Optional

WITHIN = 0.02  # "a speedup of 1.00" means within 1.00 ± 2 %

# names the evaluator uses (flags, warning prefixes, error kinds) for a reference that
# changes its inputs or gives different outputs on the same inputs
_MUTATES = ("input_mutation", "reference_mutates", "mutates")
_NONDETERMINISTIC = ("uninitialized_memory", "nondetermin", "not deterministic")


def _text(row: dict) -> str:
    parts = [*(row.get("flags") or []), *(row.get("warnings") or []), row.get("error_kind") or "",
             row.get("error_msg") or ""]
    return " ".join(str(p) for p in parts).lower()


def on_gpu(row: dict) -> bool:
    return str(row.get("device") or "").startswith("cuda")


def verdict(row: dict) -> tuple[bool, Optional[str]]:
    """(finished, why not): why is None when it finished."""
    stage = row.get("stage") or "?"
    if row.get("error_kind"):
        msg = " ".join(str(row.get("error_msg") or "").split())
        return False, f"{stage}: {row['error_kind']}" + (f": {msg[:300]}" if msg else "")
    if row.get("flags"):
        msg = " ".join(str(row.get("error_msg") or "").split())
        return False, f"{stage}: flagged {', '.join(map(str, row['flags']))}" + (f": {msg[:300]}" if msg else "")
    if not row.get("self_check"):
        return False, "not a self-check result (self_check is false)"
    if row.get("verifiable") is False:
        return False, f"{stage}: cannot be checked on {row.get('device') or 'this device'}"
    trials, passed = int(row.get("trials") or 0), int(row.get("trials_passed") or 0)
    if not trials or passed != trials:
        return False, f"{stage}: {passed} of {trials} correctness trials passed"
    if not row.get("correct"):
        return False, f"{stage}: judged incorrect"
    if on_gpu(row) and not (row.get("timing_available") and row.get("speedup")):
        return False, f"{stage}: not timed on the GPU"
    return True, None


def notes(row: dict) -> list[str]:
    """What the self-check says about the reference itself, by name."""
    text, out = _text(row), []
    if any(k in text for k in _MUTATES):
        out.append("input_mutation: the reference mutates its inputs")
    if any(k in text for k in _NONDETERMINISTIC):
        out.append("nondeterministic: two runs of the reference on the same inputs differ")
    return out


def spread(speedups: Iterable[float]) -> dict:
    xs = sorted(float(x) for x in speedups if x)
    if not xs:
        return {"n": 0, "min": None, "median": None, "max": None, "within_2pct": None}
    within = sum(1 for x in xs if abs(x - 1.0) <= WITHIN)
    return {"n": len(xs), "min": xs[0], "median": statistics.median(xs), "max": xs[-1],
            "within_2pct": within / len(xs)}


def summarize(rows: Iterable[dict]) -> dict:
    """The self-check part of a run's summary, over one result dict per task."""
    rows = sorted(rows, key=lambda r: (int(r.get("level") or 0), str(r.get("task"))))
    finished, unfinished, named, speedups = 0, [], [], []
    per_level: dict[str, dict] = {}
    for r in rows:
        ok, why = verdict(r)
        lvl = per_level.setdefault(str(int(r.get("level") or 0)), {"n": 0, "finished": 0})
        lvl["n"] += 1
        if ok:
            finished += 1
            lvl["finished"] += 1
            if r.get("speedup"):
                speedups.append(float(r["speedup"]))
        else:
            unfinished.append({"task": r.get("task"), "why": why})
        for note in notes(r):
            named.append({"task": r.get("task"), "note": note})
    return {"tasks": len(rows), "finished": finished, "timed": len(speedups), "levels": per_level,
            "speedup": spread(speedups), "unfinished": unfinished, "notes": named}


def _x(v: Optional[float]) -> str:
    return "n/a" if v is None else f"{v:.3f}x"


def lines(sc: dict) -> list[str]:
    """The self-check summary as plain lines for the terminal."""
    out = [f"harness self-check (each problem's own Model as its candidate; not solutions): "
           f"{sc['finished']} of {sc['tasks']} finished"]
    for lvl, c in sc["levels"].items():
        out.append(f"  level {lvl}: {c['finished']}/{c['n']} finished")
    s = sc["speedup"]
    if s["n"]:
        out.append(f"self-speedup over {s['n']} timed: min {_x(s['min'])}  median {_x(s['median'])}  "
                   f"max {_x(s['max'])}  within 1.00 ± {WITHIN:.0%}: {s['within_2pct']:.1%}")
    else:
        out.append("self-speedup: n/a (no problem was timed: timing needs a GPU)")
    if sc["unfinished"]:
        out.append(f"did not finish ({len(sc['unfinished'])}):")
        out.extend(f"  {u['task']}: {u['why']}" for u in sc["unfinished"])
    for n in sc["notes"]:
        out.append(f"note: {n['task']}: {n['note']}")
    return out
