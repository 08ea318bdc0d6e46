"""The verdict: candidate outputs against trusted reference outputs, and a candidate
worker's claims against what the harness can check itself.

Covers, in the harness process: every correctness trial compared with the reference
process's outputs (``correctness.compare``), result caching (a refill of the same
buffers; a trial that returned an earlier trial's output), uninitialized memory (two
runs under different poison), hard-coded sizes (the perturbed run), the custom-kernel
evidence (launch counts and torch work of *every* audited correctness call: a candidate
must show its kernels on all of them), input mutation and aliasing, precision (float32
outputs of every compared call against its float64 oracle and the limits calibrated for the
problem, precision.py: trials, refill, second run, perturbed size, timed rounds and checks), and for
timing: outputs computed while timed, the reference's time beside the candidate against
its time in the reference process, the candidate's claimed event times against the wall
time the harness measured around the timed calls, the profiler's view, the interval on the
speedup the worker computed from its pair ratios (a claim like its times, bounded by the
same checks), and last the speed-of-light floor (``light``, ``lightspeed.py``). A worker's report
can only make its candidate fail: nothing it claims turns a wrong output into a right one.
Does not cover: running anything (``evaluator.py`` drives the processes).
"""

from __future__ import annotations

import math
from typing import Optional

from ...records import EvalResult, KernelTime
from ..shared import precision
from . import guards
from .correctness import compare


def flag(res: EvalResult, hits: list[tuple[str, str]]) -> None:
    for name, why in hits:
        if name not in res.flags:
            res.flags.append(name)
            res.error_msg = "; ".join(filter(None, [res.error_msg, f"{name}: {why}"]))


def add_worker_flags(res: EvalResult, out: dict) -> None:
    """Flags a worker raised on its own candidate (threads, tensor subclasses, …): trusted
    only in the direction that hurts the candidate."""
    notes = {str(n).split(":", 1)[0]: str(n) for n in out.get("notes", []) if isinstance(n, str)}
    for f in out.get("flags", []):
        if isinstance(f, str) and f in guards.FLAGS and f not in res.flags:
            res.flags.append(f)
            if f in notes:
                res.error_msg = "; ".join(filter(None, [res.error_msg, notes[f][:300]]))


def _invalid(leaves: list) -> Optional[str]:
    for x in leaves:
        if isinstance(x, dict) and x.get("kind") == "invalid":
            return x.get("why", "an invalid output")
    return None


def correctness(res: EvalResult, out: dict, cand: dict, ref: dict, backend: str, static_kernels: list[str],
                cfg, on_gpu: bool, facts: Optional[dict] = None) -> None:
    """Fill ``res`` from one candidate's correctness phase. ``cand``: key -> leaves read by
    the harness; ``ref``: the reference cache entry; ``out``: the worker's report."""
    res.trials = len(ref["refs"])
    worst_abs, worst_rel, worst_l2, low_bits, ref_bits = 0.0, 0.0, 0.0, 0.0, 0.0
    for i, r in enumerate(ref["refs"]):
        got = cand.get(f"cand{i}", [])
        bad = _invalid(got)
        if bad:
            res.error_kind, res.error_msg = "output_structure", f"trial {i + 1}: {bad}"
            break
        c = compare(*aligned(r, got), cfg.atol, cfg.rtol)
        low_bits, ref_bits = max(low_bits, c.low_mantissa_share), max(ref_bits, c.ref_low_mantissa_share)
        worst_abs, worst_rel = max(worst_abs, c.max_abs), max(worst_rel, c.max_rel)
        worst_l2 = max(worst_l2, c.rel_l2)
        if not c.ok:
            res.error_kind, res.error_msg = c.error_kind, f"trial {i + 1}: {c.message}"
            if stale(got, [cand.get(f"cand{j}") for j in range(len(ref["refs"])) if j != i]):
                flag(res, [("result_caching", f"trial {i + 1} returned another trial's output")])
            break
        res.trials_passed += 1
    res.max_abs_diff, res.max_rel_diff, res.rel_l2_error = worst_abs, worst_rel, worst_l2
    add_worker_flags(res, out)
    if "determinism0" in cand and "cand0" in cand:
        d = compare(values(cand["cand0"]), values(cand["determinism0"]), cfg.atol, cfg.rtol)
        if not d.ok and d.error_kind in ("wrong_output", "nan_inf"):
            flag(res, [("uninitialized_memory", "two runs on the same inputs differ: " + d.message)])
    for fact, note in (("ref_mutates", "reference_mutates_inputs: the problem's own Model changes its inputs"),
                       ("ref_aliases", "reference_returns_input: the problem's own Model returns an input's memory"),
                       ("ref_nondeterministic", "reference_nondeterministic: the problem's own Model gave two "
                                                "different outputs for the same inputs")):
        if ref.get(fact) and note not in res.warnings:
            res.warnings.append(note)
    if out.get("cand_mutates") and not ref.get("ref_mutates"):
        flag(res, [("input_mutation", "an input tensor changed during forward")])
    if out.get("cand_aliases") and not ref.get("ref_aliases"):
        flag(res, [("returns_input", "an output tensor lives in an input's memory")])
    if res.error_kind:
        return
    if "recheck1" in cand and len(ref["refs"]) > 1:
        if not compare(*aligned(ref["refs"][1], cand["recheck1"]), cfg.atol, cfg.rtol).ok:
            flag(res, [("result_caching", "refilling the same input buffers with new values gave a wrong result")])
    if ref.get("perturb_used"):
        if out.get("perturb_error"):
            flag(res, [("shape_hardcoding", f"at sizes {ref['perturb_used']}: {str(out['perturb_error'])[:300]}")])
        elif "pcand" in cand:
            p = compare(*aligned(ref["pref"], cand["pcand"]), cfg.atol, cfg.rtol)
            if not p.ok:
                flag(res, [("shape_hardcoding", f"at sizes {ref['perturb_used']}: {p.message}")])
        else:
            flag(res, [("shape_hardcoding", f"no output at sizes {ref['perturb_used']}")])
    elif cfg.perturb_shapes:
        res.warnings.append("perturbation_skipped: no perturbed size was valid for the reference")
    if ref.get("odd_used"):  # generality at odd sizes: information, never a flag
        where = f"at odd sizes {ref['odd_used']}"
        if out.get("odd_error"):
            res.warnings.append(f"odd_sizes: fails {where}: {str(out['odd_error'])[:200]}")
        elif "ocand" in cand:
            o = compare(*aligned(ref["podd"], cand["ocand"]), cfg.atol, cfg.rtol)
            if not o.ok:
                res.warnings.append(f"odd_sizes: wrong {where}: {o.message[:200]}")
    evidence(res, out, ref, backend, static_kernels, cfg, on_gpu, facts)
    judge_precision(res, ref, {k: v for k, v in cand.items() if not _timed_key(k)}, cfg, low_bits, ref_bits)


def _timed_key(key: str) -> bool:
    return key.startswith(("timed", "check"))


def judge_precision(res: EvalResult, ref: dict, cand: dict, cfg, low_bits: float = 0.0, ref_bits: float = 0.0) -> None:
    """Every compared call's float32 outputs in ``cand`` held to the problem's precision limit
    (``precision.verdict``): the correctness phase's, then the timed phase's, added to the
    record the result already has."""
    prec = precision.verdict(ref, cand, cfg.precision_margin, cfg.precision_ratio, cfg.precision_rel_l2)
    rec = prec.record()
    if rec is not None:
        old = res.precision or {}
        res.precision = {"oracle_calls": old.get("oracle_calls", 0) + rec["oracle_calls"],
                         "leaves": (old.get("leaves") or []) + rec["leaves"]}
    res.warnings += [w for w in prec.warnings if w not in res.warnings]
    flag(res, guards.precision_flag(prec.leaves, low_bits, ref_bits))


def evidence(res: EvalResult, out: dict, ref: dict, backend: str, static_kernels: list[str], cfg, on_gpu: bool,
             facts: Optional[dict] = None) -> None:
    """Custom kernels from every correctness call: the fewest custom launches and the most
    torch work seen on any call count (a candidate that shows its kernel only on some calls
    gets no credit for it). On a GPU the launches are the kernels the GPU ran whose names
    the candidate's source defines (``profile.classify`` of each call's raw kernel table),
    never the worker's own count; on the CPU, the Triton launches counted. Coverage is the
    lower of time coverage (GPU) and work coverage (``_work_coverage``; ``facts``: the
    candidate's kernels as ``kernelwork.analyze`` read them), the latter at the task's size
    and at the perturbed size alike; host reads and writes make ``host_work``."""
    from ..shared import profile

    audits = [a for a in out.get("audits") or [] if isinstance(a, dict)]
    launches = [int(_num(a.get("launches"))) for a in audits]
    tables = profile.split_tables(out["checked_kernels"]) if on_gpu and isinstance(out.get("checked_kernels"), dict) \
        else []
    seen = [profile.classify(t, static_kernels) for t in tables]
    if seen:  # the GPU's activity records decide, for every backend
        launches = [int(c["custom_launches"]) for c in seen]
    n = min(launches) if launches else 0
    res.custom_launches = n
    if launches and len(set(launches)) > 1:
        res.warnings.append(f"launch_counts_differ: custom launches per correctness call {launches}")
    if backend != "cuda" or seen:
        flag(res, guards.kernel_flags(n, static_kernels, backend, on_gpu))
    for a in audits:
        flag(res, guards.host_work_flag(_num(a.get("dtoh_bytes")), _in_bytes(a, ref), _num(a.get("items")),
                                        min(_num(a.get("in_elems")), _in_bytes(a, ref)), _num(a.get("item_bytes")),
                                        _num(a.get("host_writes")), _out_elems(ref) if a.get("task", True) is True else 0))
    if not on_gpu and facts:  # a CUDA source cannot run on the CPU (load_inline is refused there): text alone
        facts = {**facts, "cuda": {}}  # never makes the work unknown
    work_cov = _work_coverage(audits, seen, ref, facts)
    times = [c["time_coverage"] for c, t in zip(seen, tables) if t["task"] and c["time_coverage"] is not None]
    res.timing_detail["evidence"] = {"work_coverage": work_cov, "time_coverage": min(times) if times else None,
                                     "checked_custom_us": _checked_custom_us(seen, tables), "profiled_calls": len(seen),
                                     "checked_names": _fewest_by_name(seen)}
    res.coverage = profile.combined(min(times) if times else None, work_cov)
    if not seen and work_cov is not None:
        res.warnings.append("coverage_estimated: share of the candidate's executed work done by its custom kernels")
    if "no_custom_kernel" not in res.flags and "decoy_kernel" not in res.flags:
        flag(res, guards.coverage_flag(res.coverage, cfg.min_coverage, "custom kernels' coverage (time and work)"))


def _work_coverage(audits: list[dict], seen: list[dict], ref: dict, facts: Optional[dict]) -> Optional[float]:
    """The least share, over the audited calls (the task's size and the perturbed one), of the
    candidate's own executed work that its custom kernels did (``profile.work_share``): the
    kernels' work read from their source over the launches recorded (capped by the runs
    the GPU recorded), the torch ops' work as run. Only stores that reach the call's output
    are credited (the worker's flow record), each launch at most the reference's work per
    output element for each element it stored there (at the task's size). A kernel for the
    task's size with torch doing every other size covers nothing at the perturbed one."""
    from ..shared import kernelwork, profile

    facts = facts or {"triton": {}, "cuda": {}}
    calls = [a for a in audits if isinstance(a.get("work"), (int, float)) and not isinstance(a.get("work"), bool)]
    names = [c["by_name"] for c in seen] if len(seen) == len(calls) else [None] * len(calls)
    moves = bool(ref.get("ref_moves"))
    out_elems = _out_elems(ref)
    ref_work = _num(ref.get("ref_work"))
    per_elem = ref_work / out_elems if out_elems > 0 and ref_work > 0 else None  # at the task's size
    shares = []
    for a, by_name in zip(calls, names):
        task = a.get("task", True) is True
        custom = kernelwork.custom_work(a.get("kernels"), facts, moves, by_name, flow=a.get("flow"),
                                        per_elem=per_elem if task else None)
        shares.append(profile.work_share(custom, _num(a["work"]), ref.get("ref_work" if task else "perturb_work"),
                                         a.get("plain"), ref.get("ref_plain" if task else "perturb_plain")))
    known = [s for s in shares if s is not None]
    return min(known) if known else None


def _num(x) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x else 0.0


def _out_elems(ref: dict) -> float:
    """Elements of the reference's outputs at the task's size (trusted)."""
    shapes = [m.get("shape") for m in ref.get("out_meta") or [] if isinstance(m, dict)]
    return float(sum(math.prod(s) for s in shapes if isinstance(s, list) and all(isinstance(d, int) for d in s)))


def _in_bytes(a: dict, ref: dict) -> float:
    """A call's input bytes: the reference process's figure at the task's size (trusted),
    the worker's at the perturbed size."""
    return _num(ref.get("input_bytes")) if a.get("task", True) is True and ref.get("input_bytes") \
        else _num(a.get("in_bytes"))


def _fewest_by_name(seen: list[dict]) -> dict:
    """Each custom kernel's fewest launches in a compared call (0 where a call lacked it)."""
    names = {n for c in seen for n in c["by_name"]}
    return {n: min(c["by_name"].get(n, 0.0) for c in seen) for n in sorted(names)}


def _checked_custom_us(seen: list[dict], tables: list[dict]) -> float:
    """The least custom kernel time of a compared call at the task's size (microseconds)."""
    us = [c["custom_us"] for c, t in zip(seen, tables) if t["task"]]
    return min(us) if us else 0.0


def timing(res: EvalResult, out: dict, cand: dict, ref: dict, backend: str, static_kernels: list[str],
           base: Optional[dict], wall_ms: Optional[float], cfg, checks=None) -> None:
    """Fill the timing fields of ``res`` and check the worker's claims (``checks``: the
    harness's timed checks as drawn, (position, seed) each)."""
    t = out.get("timing")
    if not isinstance(t, dict):
        return
    flag(res, timed_outputs(t, cand, ref, cfg, checks))
    judge_precision(res, ref, {k: v for k, v in cand.items() if _timed_key(k)}, cfg)
    try:
        res.runtime_ms = float(t["cand"]["median"])
        res.ref_runtime_ms = float(t["ref"]["median"])
        res.runtime_spread = t["cand"].get("spread")
        res.speedup = float(t["speedup"])
    except (KeyError, TypeError, ValueError):
        flag(res, [("timing_mismatch", "the worker's timing report is malformed")])
        return
    res.timing_available = True
    res.speedup_ci = _interval(t.get("speedup_ci"))
    if res.speedup_ci is None:
        res.warnings.append("speedup_ci: null: the worker's timing report has no interval")
    res.timing_detail["ci"] = {"level": 0.95, "method": "pairs_within_blocks_bootstrap",
                               "half_width": _half_width(res.speedup_ci, res.speedup),
                               "target": t.get("ci_target") or None, "pairs": t.get("iters"),
                               "planned_pairs": t.get("planned_iters")}
    res.timing_detail.update({k: t[k] for k in ("iters", "placements", "block_speedups", "wall_excess_vs_ref_ms",
                                           "sync_overhead_ms", "lead_us", "warmup_ms", "clock_mhz", "flush", "plan",
                                           "phase_ms")
                              if k in t})  # update: the correctness phase's "evidence" stays
    res.timing_detail["ref_spread"] = t["ref"].get("spread")
    if base and base.get("eager_ms") and base.get("compile_ms"):
        from .baselines import vs_compile

        res.compile_runtime_ms, res.speedup_compile = vs_compile(res.speedup, base["eager_ms"], base["compile_ms"],
                                                                 res.ref_runtime_ms)
    flag(res, guards.side_stream_flag(t, cfg.wall_event_ratio))
    known = base or {}
    clean, gpu_ms = known.get("eager_ms_now") or known.get("eager_ms"), known.get("ref_gpu_ms")
    if guards.host_bound(clean, gpu_ms):
        res.timing_detail["reference_host_bound"] = {"eager_ms": clean, "gpu_ms": gpu_ms}
    flag(res, guards.reference_slowed_flag(res.ref_runtime_ms, clean, cfg.ref_time_tolerance))
    flag(res, guards.reference_time_flag(res.ref_runtime_ms, clean, cfg.ref_time_tolerance, gpu_ms))
    flag(res, wall_check(res, t, base, wall_ms, cfg))
    timed_evidence(res, out.get("kernels"), static_kernels, base, cfg)


def _interval(ci) -> Optional[list[float]]:
    """A reported [low, high] as two finite positive numbers in order, else None."""
    if not (isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci)):
        return None
    lo, hi = float(ci[0]), float(ci[1])
    return [lo, hi] if 0 < lo <= hi and math.isfinite(hi) else None


def _half_width(ci, point) -> Optional[float]:
    from ...intervals import half_width

    hw = half_width(ci, point)
    return round(hw, 5) if hw is not None else None


def light(res: EvalResult, ref: dict, peaks: Optional[dict]) -> None:
    """Speed of light, the last timing defence: the problem's floor on this card
    (``lightspeed.floor``), the candidate's ``peak_fraction`` and, for a timed time below the
    byte floor by more than ``FTL_MARGIN``, the ``faster_than_light`` verdict."""
    from . import lightspeed

    if res.runtime_ms is None:
        return
    fl = lightspeed.floor(_num(ref.get("input_bytes")), _num(ref.get("output_bytes")), ref.get("ref_flops") or {},
                          peaks) if peaks else None
    if fl is None:
        res.warnings.append("peak_fraction: null: this card's peaks could not be measured")
        return
    res.timing_detail["light"] = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in fl.items()}
    res.peak_fraction = lightspeed.peak_fraction(fl["floor_ms"], res.runtime_ms)
    why = lightspeed.faster_than_light(res.runtime_ms, fl)
    if why and not res.error_kind:
        res.error_kind, res.error_msg = "faster_than_light", why


def timed_evidence(res: EvalResult, table, static_kernels: list[str], base: Optional[dict], cfg) -> None:
    """The candidate's kernels in its timed calls (kineto over the whole timed phase, each
    kernel attributed to the side whose call launched it): hidden work and streams, the
    kernel table shown, its own kernels present as in the compared calls, and coverage
    (the lower of this time coverage and the one from the compared calls)."""
    from ..shared import profile

    prof = table if isinstance(table, dict) else {}
    c = profile.classify(prof, static_kernels)
    calls = c["calls"]
    per_call_ms = c["total_us"] / 1e3 / calls if prof else None
    res.timing_detail["profiled_ms_per_call"] = per_call_ms
    res.timing_detail["profiled_streams"] = prof.get("streams")
    flag(res, guards.hidden_work_flag(per_call_ms, res.runtime_ms, cfg.wall_event_ratio))
    flag(res, guards.stream_flag(prof.get("streams"), (base or {}).get("ref_streams")))
    rows = [r for r in prof.get("top") or [] if isinstance(r, dict)]
    res.kernels = [KernelTime(name=str(r.get("name"))[:120], time_ms=_num(r.get("time_us")) / 1e3 / calls,
                              custom=profile.is_custom(str(r.get("name")), static_kernels),
                              calls=max(1, int(_num(r.get("calls")) // calls))) for r in rows[:8]]
    if not prof:
        return
    checked = (res.timing_detail.get("evidence") or {})
    names = checked.get("checked_names") if isinstance(checked.get("checked_names"), dict) else {}
    flag(res, guards.timed_kernels_flag(res.custom_launches, c["custom_launches"] / calls,
                                        _num(checked.get("checked_custom_us")), c["custom_us"] / calls,
                                        names, c["by_name"]))
    if not checked.get("profiled_calls"):  # no compared call was profiled (audit off): these launches decide
        res.custom_launches = max(res.custom_launches, c["custom_launches"] // calls)
        flag(res, guards.kernel_flags(res.custom_launches, static_kernels, "triton", True))
    res.timing_detail["evidence"] = {**checked, "timed_time_coverage": c["time_coverage"]}
    cov = [x for x in (res.coverage, c["time_coverage"]) if x is not None]
    res.coverage = min(cov) if cov else None
    if "no_custom_kernel" not in res.flags and "decoy_kernel" not in res.flags:
        flag(res, guards.coverage_flag(res.coverage, cfg.min_coverage, "custom kernels' coverage (time and work)"))


def timed_outputs(t: dict, cand: dict, ref: dict, cfg, checks=None) -> list[tuple[str, str]]:
    """The outputs of the timed phase: the last round's (the trials' inputs as they are) and
    the timed checks' (rounds the harness picked and told the worker only when its timed
    phase began, on inputs varied from seeds the reference process used too). Every check
    the claimed rounds allow must be there (a worker that claims fewer rounds than the
    configured minimum is not believed). Check j lands on a round of any set k, known only
    from the positions and the rounds (``timing.check_positions``): its output is
    ``check{j x trials + k}``, compared with the reference's on set k."""
    from ..shared.timing import check_positions

    hits: list[tuple[str, str]] = []
    for k, leaves in cand.items():
        if k.startswith("timed") and k[5:].isdigit() and int(k[5:]) < len(ref["refs"]):
            c = compare(*aligned(ref["refs"][int(k[5:])], leaves), cfg.atol, cfg.rtol)
            if not c.ok:
                hits.append(("inconsistent_under_timing", c.message))
    vrefs = ref.get("vrefs") or []
    if not vrefs:
        return hits
    try:
        iters, sets = int(t["iters"]), int(t["sets"])
    except (KeyError, TypeError, ValueError):
        return hits + [("timing_mismatch", "the worker's timing report lacks its rounds")]
    if iters < cfg.timing_iters:
        return hits + [("timing_mismatch", f"{iters} timed rounds reported, fewer than the {cfg.timing_iters} "
                        "every timing runs")]
    trials = max(1, len(ref.get("refs") or []))
    n_checks = len(vrefs) // trials
    drawn = list(checks)[:n_checks] if checks is not None else [(0.0, 0)] * n_checks
    for r, (j, _) in sorted(check_positions(drawn, iters, sets).items(), key=lambda x: x[1][0]):
        at = j * trials + r % max(1, sets)
        if checks is None:  # the positions unknown here: whichever set the worker names
            at = next((j * trials + k for k in range(trials) if f"check{j * trials + k}" in cand), at)
        got = cand.get(f"check{at}") if at < len(vrefs) else None
        if got is None:
            hits.append(("inconsistent_under_timing", f"timed check {j + 1}'s output was not handed over"))
            continue
        c = compare(*aligned(vrefs[at], got), cfg.atol, cfg.rtol)
        if not c.ok:
            hits.append(("inconsistent_under_timing", f"timed check {j + 1}: {c.message}"))
    return hits


def wall_check(res: EvalResult, t: dict, base: Optional[dict], wall_ms: Optional[float], cfg) -> list[tuple[str, str]]:
    """The worker's event times must add up to the wall time the harness measured around the
    timed calls: each of the 2 x iters calls is its event time, the lead and the per-call
    overhead the reference process measured timing the reference against itself (flush,
    synchronize, bookkeeping), plus the fresh-value copies. A worker that reports its
    candidate faster than it ran leaves time unexplained; one that reports more, less.
    What it cannot see: a worker that skips timed calls (all but the last round, whose
    outputs are compared) and reports times that match the shortened wall time."""
    if wall_ms is None or not base or "call_overhead_ms" not in base:
        return []
    try:
        iters = int(t["iters"])
        claimed = float(t["ref_sum_ms"]) + float(t["cand_sum_ms"])
        lead_ms = min(float(t.get("lead_us", 0.0)), 250.0) / 1e3
    except (KeyError, TypeError, ValueError):
        return [("timing_mismatch", "the worker's timing report lacks its sums")]
    calls = 2 * iters
    varied = max(0, iters - int(t.get("sets", 0))) if t.get("fresh_values") else 0
    overhead = calls * (float(base["call_overhead_ms"]) + lead_ms) + varied * float(base.get("vary_ms", 0.0))
    unexplained = wall_ms - claimed - overhead
    allowed = cfg.wall_slack * float(t["cand_sum_ms"]) + calls * 0.5 + 20.0
    res.timing_detail["wall"] = {"wall_ms": round(wall_ms, 3), "claimed_ms": round(claimed, 3),
                                 "overhead_ms": round(overhead, 3), "unexplained_ms": round(unexplained, 3)}
    if unexplained > allowed:
        return [("timing_mismatch", f"{unexplained:.1f} ms of the timed phase's {wall_ms:.1f} ms wall time are not "
                 f"in the reported event times ({claimed:.1f} ms) or the flushes ({overhead:.1f} ms)")]
    if unexplained < -(0.05 * claimed + calls * 0.5 + 20.0):
        return [("timing_mismatch", f"the reported event times ({claimed:.1f} ms) and the per-call overhead the "
                 f"reference process measured ({overhead:.1f} ms) exceed the wall time the harness measured "
                 f"({wall_ms:.1f} ms) by {-unexplained:.1f} ms")]
    return []


# --------------------------------------------------------------------------- helpers
def values(leaves: list) -> list:
    """Sampled leaves as their 1-D sample vectors (same seed → same indices), others as they are."""
    return [x["values"] if isinstance(x, dict) and "values" in x else x for x in leaves]


def aligned(ref_leaves: list, cand_leaves: list) -> tuple[list, list]:
    """Pair reference leaves with candidate leaves. Large outputs are samples at the same
    indices on both sides (the reference entry's seed), compared value for value once
    their full shape and dtype agree; any other mismatch is left for compare() to report
    (shape placeholders are expanded zeros: nothing is materialized)."""
    import torch

    def placeholder(x):  # a sample's full shape, as a tensor that costs nothing
        return torch.zeros(1, dtype=x["values"].dtype).expand(tuple(x["full_shape"]))

    def sampled(x) -> bool:
        return isinstance(x, dict) and "values" in x

    refs, cands = [], []
    for i, x in enumerate(cand_leaves):
        r = ref_leaves[i] if i < len(ref_leaves) else None
        if sampled(x) and sampled(r):
            same = (r["seed"] == x["seed"] and list(r["full_shape"]) == list(x["full_shape"])
                    and r["values"].dtype == x["values"].dtype)
            refs.append(r["values"] if same else placeholder(r))
            cands.append(x["values"] if same else placeholder(x))
        elif sampled(x) or sampled(r):
            refs.append(placeholder(r) if sampled(r) else r)
            cands.append(placeholder(x) if sampled(x) else x)
        else:
            refs.append(r)
            cands.append(x)
    refs += ref_leaves[len(cand_leaves):]
    return [r for r in refs if r is not None] if len(refs) != len(cands) else refs, cands


def stale(out, earlier) -> bool:
    """True when ``out`` equals, bit for bit, an output returned for other inputs."""
    import torch

    def plain(x):  # (what the values are of, the values)
        if isinstance(x, dict) and "values" in x:
            return (x["seed"], tuple(x["full_shape"])), x["values"]
        return None, x

    def same(p, t) -> bool:
        (kp, vp), (kt, vt) = plain(p), plain(t)
        return (kp == kt and isinstance(vp, torch.Tensor) and isinstance(vt, torch.Tensor) and vp.shape == vt.shape
                and vp.dtype == vt.dtype and torch.equal(vp, vt))

    if not out or not all(isinstance(plain(t)[1], torch.Tensor) for t in out):
        return False
    values_ = [plain(t)[1] for t in out]
    if all(v.numel() < 2 or bool((v.reshape(-1) == v.reshape(-1)[0]).all()) for v in values_):
        return False  # a constant output (zeros, say) is wrong, not cached
    return any(prev and len(prev) == len(out) and all(same(p, t) for p, t in zip(prev, out)) for prev in earlier)
