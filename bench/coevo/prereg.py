"""The pre-registered tests (a)-(e) of the experiment, as pure functions of the results.

Each test's statistic, margin and failure condition are the protocol's ``tests`` (fixed
before the first arm ran); here they are computed, never tuned. Every test carries a 95 %
bootstrap confidence interval (``bootstrap_ci``: seeds drawn with replacement, then the
samples within each drawn seed and task; percentile interval), and its verdict is
``pass`` or ``fail`` (a test whose arms have not run yet fails with ``why`` saying so).

- (a) ``a_full_admits``: seeds of ``full`` that admitted at least one skill; pass with >= 2;
- (b) ``b_transfer``: held-out turn-1 Fast_1.2 of ``full``'s final model, library on minus
  off (paired by seed);
- (c) ``c_full_vs_no_admission``, (d) ``d_full_vs_frozen``: held-out turn-1 Fast_1.2 with the
  final library, ``full`` minus the other arm;
- (e) ``e_selection``: the share of held-out selections that pick an admitted skill carrying
  the task's technique, over seeds whose library holds one, ``full`` minus
  ``no_joint_training``.

(b)-(e) pass when the difference reaches the margin and the interval's lower end is above
0. Inputs: ``rows`` (one per arm, seed, step) and ``finals`` (arm -> seed -> the arm's
final held-out evaluation, ``runner.heldout_eval``). Does not cover: collecting them
(``report.py``).
"""

from __future__ import annotations

import numpy as np

Groups = dict  # seed -> task -> list of 0/1 (or float) per sample


def pooled(g: Groups) -> float:
    xs = [x for tasks in g.values() for v in tasks.values() for x in v]
    return float(np.mean(xs)) if xs else 0.0


def _draw(g: Groups, seeds: list, rng) -> float:
    vals = []
    for s in seeds:
        for v in g[s].values():
            a = np.asarray(v, dtype=float)
            if len(a):
                vals.append(a[rng.integers(0, len(a), len(a))])
    return float(np.concatenate(vals).mean()) if vals else 0.0


def bootstrap_ci(a: Groups, b: Groups | None = None, resamples: int = 2000, seed: int = 0, level: float = 0.95,
                 paired: bool = False) -> tuple[float, float]:
    """Percentile interval of pooled(a) (or pooled(a) - pooled(b)): each resample draws the
    seeds with replacement (the same draw for both when ``paired``), then every drawn seed's
    samples of each task with replacement."""
    rng = np.random.default_rng(seed)
    sa = sorted(a)
    sb = sorted(b) if b is not None else []
    out = np.empty(resamples)
    for i in range(resamples):
        da = [sa[j] for j in rng.integers(0, len(sa), len(sa))]
        x = _draw(a, da, rng)
        if b is not None:
            db = da if paired else [sb[j] for j in rng.integers(0, len(sb), len(sb))]
            x -= _draw(b, db, rng)
        out[i] = x
    tail = (1 - level) / 2 * 100
    return float(np.percentile(out, tail)), float(np.percentile(out, 100 - tail))


def _result(name: str, spec: dict, verdict: bool, ci, numbers: dict, why: str | None = None) -> dict:
    out = {"name": name, "verdict": "pass" if verdict else "fail", "margin": spec["margin"],
           "ci95": [round(ci[0], 4), round(ci[1], 4)] if ci is not None else None, "numbers": numbers,
           "statistic": spec["statistic"], "fail_if": spec["fail"]}
    if why:
        out["why"] = why
    return out


def check_a(rows: list[dict], p: dict) -> dict:
    spec, bs = p["tests"]["a_full_admits"], p["bootstrap"]
    per_seed: dict = {}
    for r in rows:
        if r["arm"] == "full":
            per_seed[r["seed"]] = per_seed.get(r["seed"], 0) + int(r["admitted"])
    if not per_seed:
        return _result("a_full_admits", spec, False, None, {}, "not run yet: no rows of the full arm")
    hit = {s: {"all": [1.0 if n > 0 else 0.0]} for s, n in per_seed.items()}
    n = sum(1 for v in per_seed.values() if v > 0)
    ci = bootstrap_ci(hit, resamples=bs["resamples"], seed=bs["seed"], level=bs["level"])
    return _result("a_full_admits", spec, n >= spec["margin"], ci,
                   {"seeds_run": len(per_seed), "seeds_admitting": n, "share_admitting": n / len(per_seed),
                    "skills_admitted_per_seed": {str(s): v for s, v in sorted(per_seed.items())},
                    "ci_of": "share of seeds admitting"})


def groups(finals: dict, arm: str, which: str, key: str, only_helpful: bool = False) -> Groups:
    """seed -> task -> the samples' ``key`` of one arm's final evaluation (``which``: on/off);
    ``only_helpful``: the tasks whose final library holds a skill carrying their technique."""
    out: Groups = {}
    for seed, f in (finals.get(arm) or {}).items():
        per = (f.get("samples") or {}).get(which) or {}
        tasks = {t: [float(x[key]) for x in xs] for t, xs in per.items()
                 if not only_helpful or f.get("helpful_skills", {}).get(t)}
        if tasks:
            out[seed] = tasks
    return out


def _diff_test(name: str, p: dict, a: Groups, b: Groups, paired: bool, labels: tuple[str, str],
               missing: str) -> dict:
    spec, bs = p["tests"][name], p["bootstrap"]
    if not a or not b:
        return _result(name, spec, False, None, {}, missing)
    d = pooled(a) - pooled(b)
    ci = bootstrap_ci(a, b, bs["resamples"], bs["seed"], bs["level"], paired=paired)
    n = {labels[0]: pooled(a), labels[1]: pooled(b), "difference": d,
         f"samples_{labels[0]}": sum(len(v) for t in a.values() for v in t.values()),
         f"samples_{labels[1]}": sum(len(v) for t in b.values() for v in t.values()),
         f"seeds_{labels[0]}": len(a), f"seeds_{labels[1]}": len(b)}
    return _result(name, spec, d >= spec["margin"] and ci[0] > 0, ci, n)


def run_all(rows: list[dict], finals: dict, p: dict) -> list[dict]:
    """The five tests over the results, in order (a)-(e)."""
    fast = "fast"
    return [
        check_a(rows, p),
        _diff_test("b_transfer", p, groups(finals, "full", "on", fast), groups(finals, "full", "off", fast), True,
                   ("library_on", "library_off"), "not run yet: needs the full arm's final evaluation"),
        _diff_test("c_full_vs_no_admission", p, groups(finals, "full", "on", fast),
                   groups(finals, "no_admission", "on", fast), False, ("full", "no_admission"),
                   "not run yet: needs the final evaluations of full and no_admission"),
        _diff_test("d_full_vs_frozen", p, groups(finals, "full", "on", fast), groups(finals, "frozen", "on", fast),
                   False, ("full", "frozen"), "not run yet: needs the final evaluations of full and frozen"),
        _diff_test("e_selection", p, groups(finals, "full", "on", "helpful", True),
                   groups(finals, "no_joint_training", "on", "helpful", True), False, ("full", "no_joint_training"),
                   "not measurable: an arm has no final evaluation whose library holds a skill carrying the "
                   "task's technique"),
    ]
