"""GPU timing of reference and candidate, interleaved so that clock drift cancels.

Covers: one timed call = device-wide synchronize, then (queued, no sync in between)
flush event, L2 flush (write a large buffer), start event, the call, end event, then a
device-wide synchronize. The flush keeps the GPU busy while the host launches the call,
so host launch jitter is hidden behind it, as ``triton.testing.do_bench`` does; the
synchronize around each call keeps calls from overlapping, so no work can be carried
from one timed call into the next. Both the event time and the synchronized wall time
(minus the flush) are kept, so work that escapes the current stream (side streams,
threads) still shows in the wall time; the candidate's wall-minus-event excess is also
taken pair by pair against the reference's, so host load alone cancels. Reference and
candidate alternate call by call (order swapped every pair) over rotating input sets;
the pairs are split into blocks, each on fresh copies of the inputs, and the speedup is
the geometric mean of the blocks' median per-pair ratios, so one evaluation averages over
several memory placements. Short kernels get more pairs: the number grows until the
timed part takes about ``budget_s`` (between ``iters`` and ``max_iters``). A GPU busy-wait
after the flush (``lead_us``; ``AUTO_LEAD``, the default, sizes it from the host launch
times seen in warm-up, at most ``AUTO_LEAD_MAX_US``) gives the host time to queue the
whole call before the start event, so host launch time and its jitter stay out of the
event time: on the H200 it took the spread of short kernels' speedups over repeated
evaluations from 9-14 % to under 0.5 %. The flush and the lead are one kernel that holds
every SM (occupy.py): work a candidate puts on another stream cannot run beside them, so
it starts after the start event and is timed. Untimed calls run first for at least
``warmup_ms``: the GPU idles at a few hundred MHz and boosts only under load, so a timing
started cold would measure the clock ramp; the SM clock at the start and end of the timed
part is reported (on the H200 under a memory-bound load it read 1,470-1,740 MHz). Every
callable used here was captured by the worker before the candidate was imported (``C``).

Does not cover: CPU timing (the interpreter says nothing about speed), deciding flags
(the harness does that from these numbers), host time beyond the lead (a call whose
launch takes longer than the capped lead is timed with the rest of its launch), or, where
the whole-GPU kernel is unavailable (``timing_detail.flush.kind == "fill"``), work a
candidate starts on another stream while the flush and the lead still run: there it is
before the start event and outside the wall time (up to ~0.1 ms plus the lead per call;
the profiler's checks, kernel time above the timed window and a second stream, see it then).
Nor host work and copy-engine transfers inside the flush and lead window: a candidate
that copies its inputs to the host on another stream (copy engines run beside the
holding kernel), computes there and copies back could hide up to the window's length
(on the H200 ~0.2 ms of flush plus at most 0.25 ms of lead per call); the profiler
would see the second stream, but a candidate can tell when the profiler records.
``lead_from_ref`` (``eval.timing_lead_from: reference``) keeps a candidate's host time
from lengthening the lead.
"""

from __future__ import annotations

import statistics
from os import urandom as _urandom

METHOD = "held-flush-v3"  # part of the baseline cache key: change it when the timing method changes


def _flush_buffer(C, dev, flush_mb: int):
    return C.empty(max(1, flush_mb) * (1 << 20) // 4, dtype=C.torch.int32, device=dev)


def sm_clock_mhz(C, dev, cycles: int = 200_000) -> float | None:
    """The SM clock now (MHz), read as the event time of a busy-wait of ``cycles`` clock
    cycles; None without ``torch.cuda._sleep``. The GPU idles at a few hundred MHz and
    boosts under load: a timing started before the clock settles measures the ramp."""
    sleep = getattr(C, "sleep", None)
    if sleep is None:
        return None
    a, b = C.Event(enable_timing=True), C.Event(enable_timing=True)
    sleep(1)  # the first launch in a process loads the kernel: keep that host time out of the probe
    C.sync(dev)
    C.record(a)
    sleep(cycles)
    C.record(b)
    C.sync(dev)
    ms = C.elapsed(a, b)
    return cycles / (ms * 1e3) if ms > 0 else None


def lead_cycles(C, dev, lead_us: float) -> int:
    """GPU clock cycles that busy-wait about ``lead_us`` microseconds (0: off, or no
    ``torch.cuda._sleep`` to wait with). Measured on the device itself, since the clock
    it counts varies by GPU and boost state."""
    if lead_us <= 0 or getattr(C, "sleep", None) is None:
        return 0
    sm_clock_mhz(C, dev)  # the first also warms the clock up
    mhz = sm_clock_mhz(C, dev)
    return int(lead_us * mhz) if mhz else 0


def warm_up(C, dev, step, calls: int, warmup_ms: float, perf) -> float:
    """Run ``step`` (one untimed call or pair) ``calls`` times and then until ``warmup_ms``
    of wall time has passed, so the GPU's clock has left its idle state before anything
    is timed. Returns the wall milliseconds of the last step (it sizes the timed run)."""
    t_start = perf()
    last_ms, i = 0.0, 0
    while i < calls or (perf() - t_start) * 1e3 < warmup_ms:
        t0 = perf()
        step(i)
        last_ms = (perf() - t0) * 1e3
        i += 1
    return last_ms


AUTO_LEAD = -1.0  # lead_us value: size the lead from the host's measured launch time
AUTO_LEAD_MAX_US = 250.0  # a candidate can slow its own launches on purpose: the lead it buys stays short


def auto_lead_us(launch_ms: list[float]) -> float:
    """The lead for ``lead_us = AUTO_LEAD``: 1.5x the median host time the slowest side takes
    to launch one call (measured in warm-up), plus 20 us, at most ``AUTO_LEAD_MAX_US`` (a
    candidate can slow its own launch on purpose). ``launch_ms``: each side's median in ms."""
    worst_us = max(launch_ms, default=0.0) * 1e3
    return min(AUTO_LEAD_MAX_US, 1.5 * worst_us + 20.0)


class _Lead:
    """The L2 flush and the busy-wait after it, queued before each timed call. ``lead_us``
    as given, or (``AUTO_LEAD``) zero during warm-up, which records each side's host launch
    times, then sized by ``settle``. With ``C.flush_hold`` (occupy.py) both are one kernel
    that holds every SM; without it, ``fill_`` and a one-thread ``_sleep`` of clock cycles."""

    def __init__(self, C, dev, lead_us: float, sides: int, hold: bool = True, sized_by: int | None = None):
        self.C, self.dev = C, dev
        self.sized_by = sized_by  # None: the slower side sizes the automatic lead; else that side alone
        self.hold = getattr(C, "flush_hold", None) if hold else None
        auto = lead_us == AUTO_LEAD
        self.us = 0.0 if auto else lead_us
        self.cycles = self._cycles()
        self._launches = [[] for _ in range(sides)] if auto else None

    def calibrate(self, flush) -> None:
        """Size the whole-GPU flush from this buffer now (occupy.FlushHold.calibrate)."""
        if self.hold is not None:
            self.hold.calibrate(self.C.torch, flush)

    def _cycles(self) -> int:
        return 0 if self.hold is not None else lead_cycles(self.C, self.dev, self.us)

    def launches(self, side: int) -> list | None:
        """Where ``_timed_call`` records side ``side``'s launch times (None: not recording)."""
        return self._launches[side] if self._launches is not None else None

    def settle(self) -> None:
        if self._launches is not None:
            sides = self._launches if self.sized_by is None else [self._launches[self.sized_by]]
            self.us = auto_lead_us([statistics.median(x) for x in sides if x])
            self.cycles, self._launches = self._cycles(), None

    def used_us(self) -> float:
        if self.hold is not None:
            return self.us
        return self.us if self.cycles else 0.0

    def queue(self, flush) -> None:
        if self.hold is not None:
            self.hold(flush, self.us)
            return
        self.C.fill_(flush, 1)
        if self.cycles:
            self.C.sleep(self.cycles)

    def describe(self) -> dict:
        """How the flush ran: one whole-GPU kernel ("hold") or fill_ plus _sleep ("fill")."""
        if self.hold is not None:
            return self.hold.describe()
        why = getattr(self.C, "flush_hold_error", None)
        return {"kind": "fill", **({"why": why} if why else {})}


def _timed_call(C, dev, fn, args, flush, ev, perf, lead: _Lead, launches: list | None = None):
    """ev = (flush_start, start, end) events. Returns (event ms, wall ms minus flush, output).

    ``lead`` queues the flush and the busy-wait after it, so the start event is reached
    only after the host has (most likely) queued the whole call. ``launches``: a list that
    gets the host milliseconds spent launching the call."""
    f0, start, end = ev
    C.sync(dev)
    t0 = perf()
    C.record(f0)
    lead.queue(flush)
    C.record(start)
    t1 = perf()
    out = fn(*args)
    if launches is not None:
        launches.append((perf() - t1) * 1e3)
    C.record(end)
    C.sync(dev)
    wall = (perf() - t0) * 1e3 - C.elapsed(f0, start)
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


def n_iters(per_iter_ms: float, iters: int, max_iters: int, budget_s: float) -> int:
    """Timed iterations: enough to fill ``budget_s``, never fewer than ``iters`` nor more than ``max_iters``."""
    if per_iter_ms <= 0:
        return max(iters, max_iters)
    return max(iters, min(max_iters, int(budget_s * 1e3 / per_iter_ms)))


def interleaved(C, dev, ref_fn, cand_fn, input_sets, iters: int, warmup: int, flush_mb: int, poison=None,
                max_iters: int | None = None, budget_s: float = 0.0, placements: int = 1, reclone=None,
                lead_us: float = 0.0, warmup_ms: float = 0.0, hold: bool = True, lead_from_ref: bool = False,
                on_timed=None, fresh: bool = True, before_compared=None, checks=None, before_other=None,
                ci_target: float = 0.0, ci_budget_s: float = 0.0) -> dict:
    """Alternate reference and candidate calls; returns medians, spreads and wall checks.

    ``placements`` > 1 (with ``reclone``, a function that copies one input set): the
    timed pairs are split into that many blocks and each block runs on fresh copies of
    the inputs, made while the previous copies still exist, so every block sees other
    addresses. Where a kernel's speed depends on where its tensors landed, one
    evaluation then averages over several placements instead of drawing one.
    ``lead_from_ref``: the automatic lead is sized from the reference's launch time alone
    (otherwise from the slower side's). ``on_timed`` is called just before the timed pairs
    start (the worker tells the harness, which measures their wall time from outside).
    ``fresh``: every timed pair but the last round runs on new values (``vary``), so an
    output memoized on its inputs' values is never served while timed. ``before_compared(k, None)``
    runs just before the candidate's call in the last round on set ``k`` (the call whose
    output is compared; outside its timed window): the worker starts that call's random
    stream there from the trial's secret call seed, as for its correctness calls.
    ``checks``: the harness's timed checks, (position in [0, 1), seed) each: the round at
    that position among all rounds (the last excepted) runs on its own set k varied from
    that seed (``vary_seeded``, which the reference process repeats for every set) and its
    output is kept as ``checked_outputs[(j, k)]``; ``before_compared(k, j)`` starts check ``j``'s random stream (from its own secret call
    seed, never from the variation seed). ``before_other()`` runs before every other timed call of the
    candidate (the worker starts a random stream from a fresh secret seed there), so no call
    differs from a compared one in how its random stream began. The candidate cannot tell
    these rounds from the others. ``ci_target`` > 0 (adaptive timing): before the last
    round, while the speedup's estimated relative half-width (``ci_estimate``) is above it
    and the timed part has run less than ``ci_budget_s``, one more placement block is timed;
    the raw pair ratios of each block come back as ``pair_blocks`` (the worker turns them
    into the reported interval, ``intervals.speedup_ci``)."""
    _perf = C.perf

    torch = C.torch
    flush = _flush_buffer(C, dev, flush_mb)
    evs = [C.Event(enable_timing=True) for _ in range(3)]
    n_sets = len(input_sets)
    lead = _Lead(C, dev, lead_us, sides=2, hold=hold, sized_by=0 if lead_from_ref else None)
    lead.calibrate(flush)

    def run_ref(args):
        e, w, out = _timed_call(C, dev, ref_fn, args, flush, evs, _perf, lead, lead.launches(0))
        if poison:
            poison(out)  # freed reference outputs must not be found by the candidate
        return e, w

    def run_cand(args):
        return _timed_call(C, dev, cand_fn, args, flush, evs, _perf, lead, lead.launches(1))

    with C.no_grad():
        def pair(i):
            run_ref(input_sets[i % n_sets])
            if before_other is not None:  # warm-up calls too: no call starts from a stream set elsewhere
                before_other()
            run_cand(input_sets[i % n_sets])

        per_pair_ms = warm_up(C, dev, pair, max(1, warmup) + 1, warmup_ms, _perf)  # the last pair sizes the run
        lead.settle()
        iters = n_iters(per_pair_ms, iters, max_iters or iters, budget_s)
        clock_start = sm_clock_mhz(C, dev)
        overhead = _sync_overhead(C, dev, _perf)
        if on_timed is not None:
            on_timed()
        ref_ev, ref_wall, cand_ev, cand_wall, ratios = [], [], [], [], []
        last_outputs, checked_outputs = {}, {}
        check_rounds = check_positions(checks or [], iters, n_sets)
        block = -(-iters // max(1, placements)) if reclone is not None else iters
        # adaptive timing extends only where the harness's count of timed checks cannot change
        adapt = ci_target > 0 and len(check_rounds) == len(checks or [])
        total, t_timed, i = iters, _perf(), -1
        while i + 1 < total:
            i += 1
            if adapt and i == total - n_sets and total + block <= ADAPTIVE_MAX_PAIRS \
                    and _perf() - t_timed < ci_budget_s and not ci_estimate(ratios, block) <= ci_target:
                total += block  # one more placement block before the compared round
            if i and i % block == 0:  # the new copies are allocated while the old ones live
                input_sets = [reclone(a) for a in input_sets] if reclone is not None else input_sets
            k = i % n_sets
            last_round = i >= total - n_sets  # its outputs are compared with the reference's: the sets as they are
            check = check_rounds.get(i)  # (index, seed) of a timed check, or None
            if check is not None:
                args = vary_seeded(C, input_sets[k], check[1])
            else:
                args = input_sets[k] if last_round or not fresh else vary(C, input_sets[k])
            for who in ((0, 1) if i % 2 == 0 else (1, 0)):
                if who == 0:
                    e, w = run_ref(args)
                    ref_ev.append(e)
                    ref_wall.append(w)
                else:
                    if before_compared is not None and (last_round or check is not None):
                        before_compared(k, None if check is None else check[0])
                    elif before_other is not None:
                        before_other()
                    e, w, out = run_cand(args)
                    cand_ev.append(e)
                    cand_wall.append(w)
                    if last_round:
                        last_outputs[k] = out
                    elif check is not None:
                        checked_outputs[(check[0], k)] = out
                    del out
            del args
            ratios.append(ref_ev[-1] / cand_ev[-1] if cand_ev[-1] > 0 else float("inf"))
        clock_end = sm_clock_mhz(C, dev)
    flush = None  # the closures hold it too: drop it before returning the cached blocks
    torch.cuda.empty_cache()
    # host time beyond the event time, candidate minus the reference beside it (pair by pair):
    # host load slows both alike and cancels here; work that escaped the stream does not
    excess = [(cw - ce) - (rw - re) for cw, ce, rw, re in zip(cand_wall, cand_ev, ref_wall, ref_ev)]
    # one speedup per placement block: they differ when speed depends on where tensors landed
    chunks = [ratios[k:k + block] for k in range(0, len(ratios), block)]
    blocks = [statistics.median(c) for c in chunks]
    return {
        "block_speedups": blocks, "lead_us": lead.used_us(), "flush": lead.describe(),
        "ref": _summary(ref_ev), "cand": _summary(cand_ev),
        "ref_wall": _summary(ref_wall), "cand_wall": _summary(cand_wall),
        "wall_excess_vs_ref_ms": statistics.median(excess),
        "speedup": placement_mean(blocks, [len(c) for c in chunks]), "sync_overhead_ms": overhead,
        "iters": total, "placements": len(blocks), "last_outputs": last_outputs, "warmup_ms": warmup_ms,
        "pair_blocks": chunks, "ci_target": ci_target, "planned_iters": iters,
        "checked_outputs": checked_outputs,
        "ref_sum_ms": sum(ref_ev), "cand_sum_ms": sum(cand_ev), "fresh_values": bool(fresh), "sets": n_sets,
        "clock_mhz": [round(x) if x else None for x in (clock_start, clock_end)],
    }


def check_positions(checks, iters: int, n_sets: int) -> dict[int, tuple[int, int]]:
    """Round -> (check index, seed) for the timed checks: check j's position u in [0, 1)
    picks among every round before the last round (every set's: a check on set k runs on
    set k varied, so no set's rounds are known to go uncompared), a taken round passing to
    the next free one. Round i is on set ``i % n_sets``. Fewer rounds than checks: the
    first ones only."""
    rounds = list(range(max(0, iters - n_sets)))
    out: dict[int, tuple[int, int]] = {}
    for j, (u, seed) in enumerate(checks):
        if len(out) >= len(rounds):
            break
        at = min(len(rounds) - 1, int(float(u) * len(rounds)))
        while rounds[at] in out:
            at = (at + 1) % len(rounds)
        out[rounds[at]] = (j, int(seed))
    return out


ADAPTIVE_MAX_PAIRS = 20_000  # adaptive timing never times more pairs than this


def ci_estimate(ratios: list[float], block: int) -> float:
    """The speedup's relative 95 % half-width from the pair ratios so far, split in blocks of
    ``block``: the normal-theory variance of a median (pi/2 x var / n on the log scale) per
    block, combined with the pair weights of ``placement_mean``. Cheap (one pass), so it can
    run between timed pairs; the reported interval is the bootstrap (``intervals.speedup_ci``).
    inf with fewer than 3 pairs in every block."""
    import math

    parts = []  # (pairs, variance of the log-ratios) per block
    for k in range(0, len(ratios), max(1, block)):
        c = [math.log(r) for r in ratios[k:k + block] if r > 0 and math.isfinite(r)]
        if len(c) >= 3:
            m = sum(c) / len(c)
            parts.append((len(c), sum((x - m) * (x - m) for x in c) / (len(c) - 1)))
    n = sum(p for p, _ in parts)
    if not n:
        return float("inf")
    var = sum((p / n) ** 2 * (math.pi / 2) * v / p for p, v in parts)
    return math.expm1(1.96 * math.sqrt(var))


def placement_mean(block_speedups: list[float], sizes: list[int]) -> float:
    """The speedup of one evaluation: the geometric mean of its placement blocks' median
    ratios, weighted by pairs per block. With one block it is that block's median. Where
    speed depends on where tensors landed, a median over all pairs jumps to whichever
    placement mode holds most pairs; this mean moves by the share of each instead."""
    import math

    pos = [(m, n) for m, n in zip(block_speedups, sizes) if m > 0 and math.isfinite(m)]
    if not pos:
        return statistics.median(block_speedups) if block_speedups else float("nan")
    return math.exp(sum(n * math.log(m) for m, n in pos) / sum(n for _, n in pos))


def solo(C, dev, fn, input_sets, iters: int, warmup: int, flush_mb: int,
         max_iters: int | None = None, budget_s: float = 0.0, lead_us: float = 0.0, warmup_ms: float = 0.0,
         hold: bool = True) -> float:
    """Median event time of one callable (the cached eager / torch.compile baselines)."""
    _perf = C.perf

    flush = _flush_buffer(C, dev, flush_mb)
    evs = [C.Event(enable_timing=True) for _ in range(3)]
    lead = _Lead(C, dev, lead_us, sides=1, hold=hold)
    lead.calibrate(flush)
    times = []
    with C.no_grad():
        def call(i):
            _timed_call(C, dev, fn, input_sets[i % len(input_sets)], flush, evs, _perf, lead, lead.launches(0))

        per_call_ms = warm_up(C, dev, call, max(1, warmup) + 1, warmup_ms, _perf)  # the last call sizes the run
        lead.settle()
        iters = n_iters(per_call_ms, iters, max_iters or iters, budget_s / 2)
        for i in range(iters):
            e, _, out = _timed_call(C, dev, fn, input_sets[i % len(input_sets)], flush, evs, _perf, lead)
            del out
            times.append(e)
    flush = None  # noqa: F841 - free the buffer now (the warm-up closure holds it too)
    return statistics.median(times)


def flush_cost(C, dev, flush_mb: int, hold: bool = True, n: int = 20) -> float:
    """Median milliseconds of one L2 flush as queued before a timed call (no lead): the part
    of a timed call's wall time that is neither the call nor the lead. Measured in the
    reference process, so the harness knows it without asking a candidate."""
    flush = _flush_buffer(C, dev, flush_mb)
    lead = _Lead(C, dev, 0.0, sides=1, hold=hold)
    lead.calibrate(flush)
    a, b = C.Event(enable_timing=True), C.Event(enable_timing=True)
    times = []
    for _ in range(n):
        C.sync(dev)
        C.record(a)
        lead.queue(flush)
        C.record(b)
        C.sync(dev)
        times.append(C.elapsed(a, b))
    return statistics.median(times)


def vary(C, args):
    """New values for one timed pair: each floating input scaled elementwise by a random
    factor in [0.9, 1): a value's sign and range stay (log, sqrt, probabilities still
    work), but no two timed calls see the same input, so a result memoized on input values
    never hits. The factors come from a generator of their own seeded from a fresh secret
    (``vary_seeded``), never from the global random stream a candidate's call started and
    can read back: the values of an uncompared round cannot be predicted, so they cannot
    tell it from a timed check's. Integer inputs (indices, sizes) stay as they are. The
    copies cost one pass over the inputs outside the timed window (``vary_cost``)."""
    return vary_seeded(C, args, _secret_seed())


def _secret_seed() -> int:
    return int.from_bytes(_urandom(8), "little") >> 2


def vary_seeded(C, args, seed: int):
    """``vary`` with the factors drawn from ``seed`` on the inputs' device: the same values
    in a worker and in the reference process (a timed check's inputs, which the reference
    process computes its outputs for)."""
    out = []
    gens: dict = {}
    for a in args:
        if isinstance(a, C.Tensor) and a.is_floating_point() and a.numel():
            g = gens.get(a.device)
            if g is None:
                g = gens[a.device] = C.torch.Generator(device=a.device)
                g.manual_seed(seed)
            out.append(C.torch.empty_like(a).uniform_(0.9, 1.0, generator=g).mul_(a))
        else:
            out.append(a)
    return out


def vary_cost(C, dev, args, n: int = 10) -> float:
    """Median milliseconds of ``vary`` on one input set, synchronized (the reference
    process measures it, so the harness can account for it in the wall time)."""
    times = []
    for _ in range(n):
        C.sync(dev)
        t0 = C.perf()
        x = vary(C, args)
        C.sync(dev)
        times.append((C.perf() - t0) * 1e3)
        del x
    return statistics.median(times)
