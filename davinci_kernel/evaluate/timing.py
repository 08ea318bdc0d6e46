"""GPU timing of reference and candidate, interleaved so that clock drift cancels.

Covers: one timed call = L2 flush (write a large buffer), device-wide synchronize,
start event, the call, end event, device-wide synchronize; both the event time and
the synchronized wall time are kept, so work that escapes the current stream (side
streams, threads) still shows in the wall time. Reference and candidate alternate
call by call (order swapped every pair) over rotating input sets; the speedup is the
median of per-pair ratios. Every callable used here was captured by the worker before
the candidate was imported (``C``). Does not cover: CPU timing (the interpreter says
nothing about speed) or deciding flags (the harness does that from these numbers).
"""

from __future__ import annotations

import statistics


def _flush_buffer(C, dev, flush_mb: int):
    return C.empty(max(1, flush_mb) * (1 << 20) // 4, dtype=C.torch.int32, device=dev)


def _timed_call(C, dev, fn, args, flush, start, end, perf):
    C.fill_(flush, 1)
    C.sync(dev)
    t0 = perf()
    C.record(start)
    out = fn(*args)
    C.record(end)
    C.sync(dev)
    wall = (perf() - t0) * 1e3
    return C.elapsed(start, end), wall, out


def _sync_overhead(C, dev, perf, n: int = 20) -> float:
    samples = []
    for _ in range(n):
        C.sync(dev)
        t0 = perf()
        C.sync(dev)
        samples.append((perf() - t0) * 1e3)
    return statistics.median(samples)


def _summary(xs: list[float]) -> dict:
    xs_sorted = sorted(xs)
    n = len(xs_sorted)
    med = statistics.median(xs_sorted)
    p10 = xs_sorted[max(0, int(0.1 * (n - 1)))]
    p90 = xs_sorted[min(n - 1, int(round(0.9 * (n - 1))))]
    return {"median": med, "p10": p10, "p90": p90, "spread": (p90 - p10) / med if med > 0 else None}


def interleaved(C, dev, ref_fn, cand_fn, input_sets, iters: int, warmup: int, flush_mb: int, poison=None) -> dict:
    """Alternate reference and candidate calls; returns medians, spreads and wall checks."""
    from .worker import _perf

    torch = C.torch
    flush = _flush_buffer(C, dev, flush_mb)
    ev = [C.Event(enable_timing=True) for _ in range(4)]
    n_sets = len(input_sets)
    with C.no_grad():
        for i in range(max(1, warmup)):
            args = input_sets[i % n_sets]
            r = ref_fn(*args)
            if poison:
                poison(r)
            del r
            cand_fn(*args)
        C.sync(dev)
        overhead = _sync_overhead(C, dev, _perf)
        ref_ev, ref_wall, cand_ev, cand_wall, ratios = [], [], [], [], []
        last_outputs = {}
        for i in range(iters):
            k = i % n_sets
            args = input_sets[k]
            order = (0, 1) if i % 2 == 0 else (1, 0)
            for who in order:
                if who == 0:
                    e, w, out = _timed_call(C, dev, ref_fn, args, flush, ev[0], ev[1], _perf)
                    ref_ev.append(e)
                    ref_wall.append(w)
                    if poison:
                        poison(out)  # freed reference outputs must not be found by the candidate
                    del out
                else:
                    e, w, out = _timed_call(C, dev, cand_fn, args, flush, ev[2], ev[3], _perf)
                    cand_ev.append(e)
                    cand_wall.append(w)
                    if i >= iters - n_sets:
                        last_outputs[k] = out
                    del out
            ratios.append(ref_ev[-1] / cand_ev[-1] if cand_ev[-1] > 0 else float("inf"))
    del flush
    torch.cuda.empty_cache()
    return {
        "ref": _summary(ref_ev), "cand": _summary(cand_ev),
        "ref_wall": _summary(ref_wall), "cand_wall": _summary(cand_wall),
        "speedup": statistics.median(ratios), "sync_overhead_ms": overhead,
        "iters": iters, "last_outputs": last_outputs,
    }


def solo(C, dev, fn, input_sets, iters: int, warmup: int, flush_mb: int) -> float:
    """Median event time of one callable (the cached eager / torch.compile baselines)."""
    from .worker import _perf

    flush = _flush_buffer(C, dev, flush_mb)
    start, end = C.Event(enable_timing=True), C.Event(enable_timing=True)
    times = []
    with C.no_grad():
        for i in range(max(1, warmup)):
            fn(*input_sets[i % len(input_sets)])
        C.sync(dev)
        for i in range(iters):
            e, _, out = _timed_call(C, dev, fn, input_sets[i % len(input_sets)], flush, start, end, _perf)
            del out
            times.append(e)
    del flush
    return statistics.median(times)
