"""Timing over several shapes (`dvk eval --shapes N`, `dvk bench --shapes N`).

Covers: the sizes a candidate is judged at beside the task's own (``tasks.shapes.timing_sizes``:
drawn as the perturbed re-check draws its size, from a seed fixed by the task and
``eval.input_seed``, so every candidate and every run of a task meets the same sizes and
two runs can be compared), one full evaluation per size (correctness and timing, as at
the task's size), and the scores kept in the task-size result's
``timing_detail["shapes"]``: each size's verdict and speedup, the geometric mean over the
sizes (the task's included; None unless every size is correct and timed) and Fast_p over
the sizes (the share of sizes correct and faster than eager by more than p). A candidate
that is not correct at the task's size is not judged at the others. ``suite_shapes`` puts
a suite's together: per p the mean over tasks of their share, and the geometric mean of the
tasks' geometric means. Does not cover: judging (``evaluate``) or printing.
"""

from __future__ import annotations

import hashlib
import math
import random
from typing import Optional

from ..records import EvalResult, Task
from ..report.fastp import DEFAULT_PS, geomean
from ..tasks.shapes import sized_source, timing_sizes


def size_tasks(task: Task, n: int, small: bool, input_seed: Optional[int] = None) -> list[tuple[dict, Task]]:
    """(overrides, the task at those sizes) for ``n`` drawn sizes (``small``: around the CPU variant)."""
    digest = hashlib.sha256(f"shapes:{input_seed or 0}:{task.hash}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    out = []
    for ov in timing_sizes(task.source, n, rng, small=small):
        tag = ",".join(f"{k}={v}" for k, v in ov.items())
        out.append((ov, Task(name=f"{task.name}@{tag}", level=task.level, problem_id=task.problem_id,
                             source=sized_source(task.source, ov), suite=task.suite, path=task.path,
                             op_type=task.op_type)))
    return out


def _size_row(sizes, r: EvalResult) -> dict:
    return {"sizes": sizes, "correct": r.correct, "speedup": r.speedup, "speedup_ci": r.speedup_ci,
            "peak_fraction": r.peak_fraction, "error_kind": r.error_kind or (",".join(r.flags) or None)}


def scores(main: EvalResult, sized: list[tuple[dict, EvalResult]], ps=DEFAULT_PS) -> dict:
    """The shape scores of one candidate: {"sizes": [task size first, then each drawn size],
    "geomean": over every size or None, "fast_<p>": share of sizes}."""
    rows = [_size_row("task", main)] + [_size_row(ov, r) for ov, r in sized]
    speedups = [r["speedup"] for r in rows]
    every = all(r["correct"] for r in rows) and all(s is not None for s in speedups)
    out: dict = {"sizes": rows, "geomean": geomean(speedups) if every else None}
    for p in ps:
        hits = [r["correct"] and (p <= 0 or (r["speedup"] is not None and r["speedup"] > p)) for r in rows]
        timed = p <= 0 or any(r["speedup"] is not None for r in rows if r["correct"])
        out[f"fast_{p:g}"] = sum(hits) / len(rows) if timed else None
    return out


class ShapedEvaluator:
    """An evaluator that also judges each candidate at ``n`` drawn sizes (``scores`` into the
    task-size result's ``timing_detail["shapes"]``); otherwise the evaluator it wraps."""

    def __init__(self, inner, n: int):
        self.inner, self.n = inner, n
        cfg = inner.cfg
        self.small = not getattr(inner, "on_gpu", False) and cfg.cpu_small_shapes
        self.input_seed = cfg.input_seed

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def evaluate(self, task: Task, source: Optional[str] = None, fresh: bool = False) -> EvalResult:
        main = self.inner.evaluate(task, source, fresh=fresh)
        sized = []
        if main.correct:
            for ov, t in size_tasks(task, self.n, self.small, self.input_seed):
                sized.append((ov, self.inner.evaluate(t, source, fresh=fresh)))
        main.timing_detail["shapes"] = scores(main, sized)
        return main

    def evaluate_many(self, items, progress=None, fresh: bool = False):
        out = []
        for i, (t, s) in enumerate(items):
            out.append(self.evaluate(t, s, fresh=fresh))
            if progress is not None:
                progress(i, out[-1])
        return out


def suite_shapes(rows: list[dict], ps=DEFAULT_PS, total: Optional[int] = None) -> Optional[dict]:
    """A suite's shape figures from its result lines: per p the mean over tasks of their
    Fast_p over sizes (a task without shape scores counts 0), "geomean" the geometric mean
    of the tasks' geometric means over sizes; None when no line has shape scores."""
    got = [(r.get("timing_detail") or {}).get("shapes") for r in rows]
    if not any(isinstance(g, dict) for g in got):
        return None
    n = max(total or 0, len(rows))
    out: dict = {"tasks": sum(isinstance(g, dict) for g in got)}
    for p in ps:
        key = f"fast_{p:g}"
        vals = [g.get(key) for g in got if isinstance(g, dict)]
        out[key] = None if vals and all(v is None for v in vals) else sum(v or 0.0 for v in vals) / max(1, n)
    gms = [g.get("geomean") for g in got if isinstance(g, dict)]
    out["geomean"] = geomean(x for x in gms if x is not None and math.isfinite(x))
    return out
