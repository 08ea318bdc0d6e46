"""Confidence intervals: pure functions on numbers, used by the evaluator and the reports.

Covers: the 95 % interval on one evaluation's speedup (``speedup_ci``: a stratified
percentile bootstrap over the timed pairs within each placement block, of the same
statistic the evaluator reports), its relative half-width (what adaptive timing stops
on), and the suite figures' intervals over tasks: Fast_p and the geometric-mean speedup
(``suite_ci``: a percentile bootstrap over tasks that also redraws each task's speedup
within its own interval), and the paired bootstrap of two runs over the tasks both
have (``paired_diff``). Every bootstrap is seeded, so the same numbers give the same
interval. Does not cover: reading results (report/) or timing (evaluate/shared/timing.py).

Notation: ``B`` resamples, ``n`` pairs of a block or tasks of a suite, ``K`` blocks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Optional

import numpy as np

LEVEL = 0.95
RESAMPLES = 2000
Z95 = 1.959963984540054  # the normal quantile of a two-sided 95 % interval
CI_METHOD = ("stratified percentile bootstrap over timed pairs within placement blocks "
             "(statistic: pair-weighted geometric mean of block medians of ref/cand ratios)")


def _tails(level: float) -> tuple[float, float]:
    a = (1.0 - level) / 2.0
    return 100.0 * a, 100.0 * (1.0 - a)


def placement_stat(log_medians: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """exp(sum_k n_k log m_k / sum_k n_k): the speedup of one evaluation from its blocks'
    median log-ratios. ``log_medians`` (..., K), ``sizes`` (K,) -> (...)."""
    return np.exp((log_medians * sizes).sum(axis=-1) / sizes.sum())


def speedup_ci(blocks: Sequence[Sequence[float]], level: float = LEVEL, resamples: int = RESAMPLES,
               seed: int = 0) -> Optional[tuple[float, float]]:
    """The ``level`` interval on an evaluation's speedup from its raw pair ratios
    (reference time / candidate time), one list per placement block. Each resample draws
    every block's pairs with replacement from that block alone (the placements stay as
    they were timed), takes each block's median log-ratio and their pair-weighted mean;
    the interval is the percentiles of the ``resamples`` results. What it covers: the
    noise between timed pairs on these placements; what it does not: a placement effect
    beyond the blocks timed (more blocks cover more of it). None when no block holds a
    finite positive ratio."""
    logs = [np.log(np.asarray([r for r in b if r > 0 and math.isfinite(r)], dtype=np.float64)) for b in blocks]
    logs = [x for x in logs if x.size]
    if not logs:
        return None
    rng = np.random.default_rng(seed)
    sizes = np.asarray([x.size for x in logs], dtype=np.float64)  # (K,)
    meds = np.empty((resamples, len(logs)))  # (B, K)
    for k, x in enumerate(logs):
        idx = rng.integers(0, x.size, size=(resamples, x.size))  # (B, n_k)
        meds[:, k] = np.median(x[idx], axis=1)
    stats = placement_stat(meds, sizes)  # (B,)
    lo, hi = np.percentile(stats, _tails(level))
    return float(lo), float(hi)


def half_width(ci: Optional[Sequence[float]], point: Optional[float]) -> Optional[float]:
    """The interval's half-width relative to ``point``: (high - low) / 2 / point; None when
    either is missing."""
    if ci is None or point is None or not point > 0:
        return None
    return (float(ci[1]) - float(ci[0])) / 2.0 / float(point)


def log_sd(ci: Optional[Sequence[float]], level: float = LEVEL) -> float:
    """The standard deviation on the log scale that a ``level`` interval on a positive
    quantity implies (normal on the log scale); 0 without an interval."""
    if ci is None or not (ci[0] and ci[0] > 0 and ci[1] and ci[1] > 0):
        return 0.0
    z = Z95 if level == LEVEL else NormalDist().inv_cdf(0.5 + level / 2)
    return max(0.0, (math.log(ci[1]) - math.log(ci[0])) / (2.0 * z))


# --------------------------------------------------------------------------- suites
def _suite_draws(speedups: Sequence[Optional[float]], correct: Sequence[bool], sds: Sequence[float],
                 idx: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Resampled tasks' (log speedups, ok): ``idx`` (B, n) picks tasks; each picked task's
    log speedup is redrawn from normal(log s, sd) (its own timing noise). -> (B, n), (B, n)."""
    s = np.asarray([v if (v is not None and v > 0 and math.isfinite(v)) else np.nan for v in speedups], float)
    ok = np.asarray(correct, bool) & ~np.isnan(s)  # (n,) correct and timed
    logs = np.log(np.where(np.isnan(s), 1.0, s))  # (n,)
    sd = np.asarray(sds, float)  # (n,)
    drawn = logs[idx] + rng.standard_normal(idx.shape) * sd[idx]  # (B, n)
    return drawn, ok[idx]


def _fast_p(drawn: np.ndarray, ok: np.ndarray, correct: np.ndarray, p: float, total: int) -> np.ndarray:
    """Fast_p per resample: (B, n) -> (B,). p <= 0: correctness alone."""
    hits = correct if p <= 0 else (ok & (drawn > math.log(p)))
    return hits.sum(axis=1) / max(1, total)


def _geomean(drawn: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Geometric mean of the correct, timed tasks per resample (nan where none): (B, n) -> (B,)."""
    cnt = ok.sum(axis=1)
    tot = np.where(ok, drawn, 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.exp(tot / np.where(cnt > 0, cnt, np.nan))


def suite_ci(speedups: Sequence[Optional[float]], correct: Sequence[bool], ps: Sequence[float],
             sds: Optional[Sequence[float]] = None, total: Optional[int] = None, level: float = LEVEL,
             resamples: int = RESAMPLES, seed: int = 0) -> dict:
    """Intervals on a suite's figures: {"fast_<p>": [low, high], "geomean": [low, high] or
    None}. Tasks are resampled with replacement (``total`` > n: the missing tasks count as
    unsolved, as in Fast_p); each drawn task's speedup is redrawn on the log scale with its
    own timing noise ``sds`` (``log_sd`` of its ``speedup_ci``; 0 = taken as exact), so a
    task whose interval straddles p counts for Fast_p in part of the draws. Fast_p for
    p > 0 has no interval when no correct task was timed."""
    n = len(speedups)
    total = max(n, total or n)
    if n == 0:
        return {**{f"fast_{p:g}": None for p in ps}, "geomean": None}
    rng = np.random.default_rng(seed)
    sd = list(sds) if sds is not None else [0.0] * n
    pad = total - n  # missing tasks: unsolved rows
    sp = list(speedups) + [None] * pad
    cor = list(correct) + [False] * pad
    idx = rng.integers(0, total, size=(resamples, total))  # (B, N)
    drawn, ok = _suite_draws(sp, cor, sd + [0.0] * pad, idx, rng)
    cmask = np.asarray(cor, bool)[idx]
    tails = _tails(level)
    out: dict = {}
    timed = any(c and s is not None for c, s in zip(cor, sp))
    for p in ps:
        if p > 0 and not timed:
            out[f"fast_{p:g}"] = None
            continue
        lo, hi = np.percentile(_fast_p(drawn, ok, cmask, p, total), tails)
        out[f"fast_{p:g}"] = [float(lo), float(hi)]
    g = _geomean(drawn, ok)
    g = g[~np.isnan(g)]
    out["geomean"] = [float(x) for x in np.percentile(g, tails)] if g.size and timed else None
    return out


def paired_diff(a: tuple[Sequence[Optional[float]], Sequence[bool], Sequence[float]],
                b: tuple[Sequence[Optional[float]], Sequence[bool], Sequence[float]], ps: Sequence[float],
                level: float = LEVEL, resamples: int = RESAMPLES, seed: int = 0) -> dict:
    """Paired bootstrap of run B against run A over the same tasks (``a`` and ``b``:
    (speedups, correct, log sds), position i the same task in both). One index draw picks
    the tasks for both runs, so what the tasks share cancels. Per p: {"diff": B - A,
    "ci": [low, high], "significant": the interval excludes 0}; "geomean": the ratio B / A
    of the geometric means, its interval and whether it excludes 1. A figure that cannot be
    computed on either run (nothing timed) is None."""
    n = len(a[0])
    if n == 0 or len(b[0]) != n:
        raise ValueError("paired_diff needs the same non-empty list of tasks in both runs")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))  # (B, n): the same tasks for both runs
    da, oka = _suite_draws(a[0], a[1], a[2], idx, rng)
    db, okb = _suite_draws(b[0], b[1], b[2], idx, rng)
    ca, cb = np.asarray(a[1], bool)[idx], np.asarray(b[1], bool)[idx]
    timed_a = any(c and s is not None for s, c in zip(a[0], a[1]))
    timed_b = any(c and s is not None for s, c in zip(b[0], b[1]))
    tails = _tails(level)
    out: dict = {"n": n}
    for p in ps:
        if p > 0 and not (timed_a and timed_b):
            out[f"fast_{p:g}"] = None
            continue
        fa = _fast_p(da, oka, ca, p, n)
        fb = _fast_p(db, okb, cb, p, n)
        point = _point_fast_p(b, p) - _point_fast_p(a, p)
        lo, hi = np.percentile(fb - fa, tails)
        out[f"fast_{p:g}"] = {"diff": point, "ci": [float(lo), float(hi)], "significant": bool(lo > 0 or hi < 0)}
    ga, gb = _geomean(da, oka), _geomean(db, okb)
    keep = ~np.isnan(ga) & ~np.isnan(gb)
    pa, pb = _point_geomean(a), _point_geomean(b)
    if keep.any() and pa and pb:
        lo, hi = np.percentile(gb[keep] / ga[keep], tails)
        out["geomean"] = {"ratio": pb / pa, "ci": [float(lo), float(hi)], "significant": bool(lo > 1 or hi < 1)}
    else:
        out["geomean"] = None
    return out


def _point_fast_p(run, p: float) -> float:
    sp, cor = run[0], run[1]
    hits = [c and (p <= 0 or (s is not None and s > p)) for s, c in zip(sp, cor)]
    return sum(hits) / max(1, len(hits))


def _point_geomean(run) -> Optional[float]:
    vals = [math.log(s) for s, c in zip(run[0], run[1]) if c and s is not None and s > 0 and math.isfinite(s)]
    return math.exp(sum(vals) / len(vals)) if vals else None
