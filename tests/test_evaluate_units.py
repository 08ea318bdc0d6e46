"""Pure helpers of the evaluator: timing iteration count and the shape re-check's sizes."""

from __future__ import annotations

import os

import pytest

from davinci_kernel.evaluate.shared.timing import n_iters
from davinci_kernel.tasks.shapes import odd_sizes, perturbations


@pytest.mark.parametrize("per_iter_ms,expect", [(100.0, 50), (1.0, 500), (0.1, 1000), (0.0, 1000), (20.0, 50)])
def test_n_iters_fills_the_budget_within_bounds(per_iter_ms, expect):
    assert n_iters(per_iter_ms, iters=50, max_iters=1000, budget_s=0.5) == expect


SRC = '''
batch_size = 5
dim = 300
num_heads = 4
PERTURB = ["batch_size", "dim"]
'''


def test_shape_recheck_tries_larger_sizes_first():
    variants = perturbations(SRC)
    first = variants[0]
    assert set(first) == {"batch_size", "dim"}
    assert first["batch_size"] > 5 and first["dim"] > 300  # a baked-in bound leaves elements unwritten
    assert first["dim"] % 4 == 0 and first["dim"] != 300  # every power-of-two factor kept, the size itself changed
    assert variants[-1]["batch_size"] < 5 and variants[-1]["dim"] < 300  # fallback when the reference rejects
    odd = odd_sizes(SRC)[0]
    assert odd["dim"] % 2 == 1 and odd["batch_size"] % 2 == 1  # the generality note's sizes


@pytest.mark.parametrize("v", [2, 3, 5, 48, 64, 81, 300, 4096, 393216, 1 << 20])
def test_keep_pow2_keeps_the_tile_multiple(v):
    from davinci_kernel.tasks.shapes import keep_pow2, tile

    pow2 = v & -v
    assert tile(v) == (pow2 if v // pow2 >= 3 else max(1, pow2 >> 4))  # every factor, or at most four given up
    up, down = keep_pow2(v), keep_pow2(v, up=False)
    assert up > v and up % tile(v) == 0
    assert down != v and down > 0
    if v >= 2:
        assert down < v and down % tile(v) == 0


def test_reference_softmax_long_rows_take_the_online_path():
    """Rows wider than the on-chip block (as at the shape re-check's larger sizes) use the loop.
    Run in a fresh interpreter-mode process: the interpreter must be on before triton loads."""
    import os
    import subprocess
    import sys

    from davinci_kernel.tasks import REFERENCE_DIR

    code = (
        "import importlib.util, torch\n"
        f"spec = importlib.util.spec_from_file_location('ref_softmax', {str(REFERENCE_DIR / 'level1' / '3_Softmax.py')!r})\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "x = torch.randn(5, 301) * 3.0\n"
        "for mb in (64, 16384):\n"
        "    torch.testing.assert_close(mod.softmax(x, max_block=mb), torch.softmax(x, dim=1), atol=1e-5, rtol=1e-5)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-2000:]


def test_stale_sees_sampled_outputs_of_one_fetch():
    """Sampled GPU outputs: the same seed and equal values mean an earlier output came back."""
    import torch

    from davinci_kernel.evaluate.harness.judge import stale as _stale

    v = torch.randn(16)
    a = [{"values": v, "seed": 7, "full_shape": [4096, 4096]}]
    same = [{"values": v.clone(), "seed": 7, "full_shape": [4096, 4096]}]
    other = [{"values": v + 1, "seed": 7, "full_shape": [4096, 4096]}]
    assert _stale(same, [a])
    assert not _stale(other, [a])
    assert _stale([v.clone()], [[v]]) and not _stale([v + 1], [[v]])


class _HostClock:
    """Test double for the worker's captured CUDA calls: events read the host clock."""

    import time as _time

    import torch as torch

    perf = staticmethod(_time.perf_counter)
    Tensor = torch.Tensor

    class Event:
        def __init__(self, enable_timing=True):
            self.t = 0.0

    @staticmethod
    def record(ev):
        import time

        ev.t = time.perf_counter()

    @staticmethod
    def elapsed(a, b):
        return (b.t - a.t) * 1e3

    empty = staticmethod(torch.empty)
    fill_ = staticmethod(torch.Tensor.fill_)
    no_grad = staticmethod(torch.no_grad)

    @staticmethod
    def sync(dev):
        return None


class _SleepingClock(_HostClock):
    """The host-clock double with a busy-wait of "cycles" at 1 GHz (one cycle = 1 ns)."""

    slept: list = []

    @staticmethod
    def sleep(cycles):
        import time

        _SleepingClock.slept.append(cycles)
        end = time.perf_counter() + cycles * 1e-9
        while time.perf_counter() < end:
            pass


def test_interleaved_timing_moves_inputs_between_blocks():
    import torch

    from davinci_kernel.evaluate.shared import timing

    seen = set()
    calls = {"reclone": 0}
    kept = []  # every copy stays alive, so the allocator cannot hand a freed address back

    def ref(x):
        seen.add(x.data_ptr())
        return x * 2

    def cand(x):
        seen.add(x.data_ptr())
        return x + x

    def reclone(args):
        calls["reclone"] += 1
        kept.append([a.clone() for a in args])
        return kept[-1]

    sets = [[torch.randn(64)], [torch.randn(64)]]
    res = timing.interleaved(_HostClock, "cpu", ref, cand, sets, iters=12, warmup=1, flush_mb=1,
                             placements=4, reclone=reclone)
    assert res["iters"] == 12 and res["placements"] == 4 and len(res["block_speedups"]) == 4
    assert res["lead_us"] == 0.0  # no busy-wait to lead with on this double
    assert calls["reclone"] == 3 * len(sets)  # before blocks 2, 3 and 4
    # the compared last round runs on the newest copies (the earlier rounds on varied inputs)
    assert {c[0].data_ptr() for c in kept[-len(sets):]} <= seen
    assert not {s[0].data_ptr() for s in sets} & {c[0].data_ptr() for c in kept}
    assert set(res["last_outputs"]) == {0, 1} and res["speedup"] > 0
    for k, out in res["last_outputs"].items():
        torch.testing.assert_close(out, sets[k][0] * 2)


def test_every_timed_candidate_call_starts_its_random_stream_from_a_seed():
    """A candidate that compares the global random state with a generator it rebuilt must not
    tell compared rounds (seeded by the harness's seeds) from the others: every timed call of
    the candidate is seeded, the others from fresh secret seeds."""
    import torch

    from davinci_kernel.evaluate.shared import timing

    seeded, cand_calls = [], []

    def cand(x):
        cand_calls.append(len(seeded))
        return x + x

    sets = [[torch.randn(8)], [torch.randn(8)]]
    res = timing.interleaved(_HostClock, "cpu", lambda x: x * 2, cand, sets, iters=10, warmup=0, flush_mb=1,
                             before_compared=lambda k, j=None: seeded.append(("compared", k, j)),
                             before_other=lambda: seeded.append(("other",)), checks=[(0.3, 77)])
    assert cand_calls[0] == 1 and all(b - a == 1 for a, b in zip(cand_calls, cand_calls[1:])), \
        "a call of the candidate (warm-up or timed) was not seeded"
    kinds = [x[0] for x in seeded[-res["iters"]:]]
    assert kinds.count("compared") == len(sets) + 1 and kinds.count("other") == res["iters"] - len(sets) - 1
    assert ("compared", 0, 0) in seeded  # check 0 starts from its own call seed (the worker's), not from 77


def test_timed_checks_fall_on_every_set_alike():
    """The compared timed rounds are drawn among all rounds before the last (not only set 0's):
    with positions uniform in [0, 1), each set carries a check with probability 1 / sets, so a
    candidate that recognises its sets cannot tell which rounds go uncompared."""
    import random

    from davinci_kernel.evaluate.shared.timing import check_positions

    rng = random.Random(0)
    iters, sets, draws = 50, 4, 4000
    hits = [0] * sets
    for _ in range(draws):
        got = check_positions([(rng.random(), 1), (rng.random(), 2)], iters, sets)
        assert len(got) == 2 and all(r < iters - sets for r in got)  # never the last round (compared as it is)
        for r in got:
            hits[r % sets] += 1
    assert all(abs(h / (2 * draws) - 1 / sets) < 0.02 for h in hits), hits
    assert check_positions([(0.0, 1)], 3, 4) == {}  # no round before the last: no check


def test_a_timed_check_on_set_k_runs_on_set_k_varied_from_its_seed():
    import torch

    from davinci_kernel.evaluate.shared import timing

    sets = [[torch.randn(8)], [torch.randn(8)], [torch.randn(8)]]
    iters = 12  # rounds 0..8 come before the last round; position 4/9 is round 4, on set 1
    res = timing.interleaved(_HostClock, "cpu", lambda x: x * 2, lambda x: x * 2, sets, iters=iters, warmup=0,
                             flush_mb=1, checks=[(4 / 9 + 1e-9, 77)])
    assert list(res["checked_outputs"]) == [(0, 1)]
    torch.testing.assert_close(res["checked_outputs"][(0, 1)], timing.vary_seeded(_HostClock, sets[1], 77)[0] * 2)


def test_uncompared_input_variations_cannot_be_predicted_from_the_random_stream():
    """The values of an uncompared timed round come from a private generator seeded from a
    fresh secret: a candidate that knows the global stream (it read the seed its call started
    from) cannot rebuild them and so cannot tell them from a timed check's."""
    import torch

    from davinci_kernel.evaluate.shared import timing

    x = [torch.randn(64)]
    torch.manual_seed(5)
    a = timing.vary(_HostClock, x)[0]
    torch.manual_seed(5)
    b = timing.vary(_HostClock, x)[0]
    assert not torch.equal(a, b) and bool(((a / x[0]) >= 0.9 - 1e-6).all())


def test_warm_up_runs_for_the_count_then_until_the_time_has_passed():
    from davinci_kernel.evaluate.shared import timing

    now = {"t": 0.0}
    steps = []

    def step(i):
        steps.append(i)
        now["t"] += 0.010  # each untimed call takes 10 ms

    last = timing.warm_up(_HostClock, "cpu", step, calls=3, warmup_ms=95.0, perf=lambda: now["t"])
    assert steps == list(range(10)) and abs(last - 10.0) < 1e-6  # 3 by count, then on to >= 95 ms
    steps.clear()
    timing.warm_up(_HostClock, "cpu", step, calls=3, warmup_ms=0.0, perf=lambda: now["t"])
    assert steps == [0, 1, 2]


def test_sm_clock_probe_reads_the_busy_wait_rate():
    from davinci_kernel.evaluate.shared import timing

    assert timing.sm_clock_mhz(_HostClock, "cpu") is None  # nothing to busy-wait with
    mhz = timing.sm_clock_mhz(_SleepingClock, "cpu", cycles=3_000_000)
    assert 0 < mhz <= 1000  # a 1 GHz double: host overhead can only make the wait longer
    res = timing.interleaved(_SleepingClock, "cpu", lambda x: x * 2, lambda x: x + x, [[__import__("torch").ones(8)]],
                             iters=4, warmup=1, flush_mb=1, warmup_ms=5.0)
    assert res["warmup_ms"] == 5.0 and len(res["clock_mhz"]) == 2 and all(c > 0 for c in res["clock_mhz"])


@pytest.mark.parametrize("launch_ms,lead", [([], 20.0), ([0.01, 0.04], 80.0), ([0.1], 170.0), ([0.2], 250.0),
                                             ([50.0], 250.0)])
def test_auto_lead_covers_the_slower_launch(launch_ms, lead):
    from davinci_kernel.evaluate.shared import timing

    assert timing.auto_lead_us(launch_ms) == pytest.approx(lead)


def test_auto_lead_is_sized_in_warm_up():
    import time

    import torch

    from davinci_kernel.evaluate.shared import timing

    def slow_launch(x):  # a call whose host side takes ~2 ms
        time.sleep(0.002)
        return x + 1

    res = timing.interleaved(_SleepingClock, "cpu", lambda x: x + 1, slow_launch, [[torch.ones(8)]], iters=4, warmup=3,
                             flush_mb=1, lead_us=timing.AUTO_LEAD)
    assert res["lead_us"] == timing.AUTO_LEAD_MAX_US  # 1.5 x ~2 ms + 20 us, capped
    assert timing.solo(_SleepingClock, "cpu", slow_launch, [[torch.ones(8)]], iters=3, warmup=2, flush_mb=1,
                       lead_us=timing.AUTO_LEAD) > 0


def test_auto_lead_from_the_reference_alone_ignores_a_slow_candidate():
    """eval.timing_lead_from: reference: host work a candidate does before its call returns
    cannot buy it a longer lead (it is then timed)."""
    import time

    import torch

    from davinci_kernel.evaluate.shared import timing

    def slow_launch(x):  # host work of ~2 ms before the call returns
        time.sleep(0.002)
        return x + 1

    def quick_launch(x):  # the reference: no host work to speak of, even on a busy machine
        return x

    # the median over 11 warm-up calls: a loaded host's odd slow call does not size the lead
    kw = dict(iters=4, warmup=11, flush_mb=1, lead_us=timing.AUTO_LEAD)
    slower = timing.interleaved(_SleepingClock, "cpu", quick_launch, slow_launch, [[torch.ones(8)]], **kw)
    ref_only = timing.interleaved(_SleepingClock, "cpu", quick_launch, slow_launch, [[torch.ones(8)]],
                                  lead_from_ref=True, **kw)
    assert slower["lead_us"] == timing.AUTO_LEAD_MAX_US
    assert 20.0 <= ref_only["lead_us"] < timing.AUTO_LEAD_MAX_US  # 1.5 x the reference's short launch + 20 us, below the cap


def _wall_timing(ev, wall, paired):
    t = {"cand": {"median": ev}, "cand_wall": {"median": wall}, "sync_overhead_ms": 0.01}
    if paired is not None:
        t["wall_excess_vs_ref_ms"] = paired
    return t


@pytest.mark.parametrize("ev,wall,paired,flagged", [
    (0.030, 0.045, 0.001, False),  # clean: wall close to event time
    (0.030, 0.120, 0.002, False),  # loaded host: the reference beside it lost as much host time
    (0.030, 0.120, 0.075, True),   # work escaped the stream: only the candidate's wall time grew
    (1.000, 3.010, 2.000, True),   # a large kernel whose work ran mostly on a side stream
    (0.030, 0.120, None, True),    # no paired numbers (older timing dicts): the plain rule
])
def test_side_stream_flag_is_paired_with_the_reference(ev, wall, paired, flagged):
    from davinci_kernel.evaluate.harness.guards import side_stream_flag

    assert bool(side_stream_flag(_wall_timing(ev, wall, paired), 1.5)) is flagged


@pytest.mark.parametrize("speedup,eager,compiled,ref,want_rt,want_x", [
    (2.0, 1.0, 0.5, 1.0, 0.5, 1.0),    # compile halves eager: a 2x kernel only ties it
    (2.0, 1.0, 2.0, 1.1, 2.2, 4.0),    # compile slower than eager: the kernel gains more
    (9.55, 3.437, 0.278, 3.43, 0.2774, 0.7725),  # RMSNorm fp16 on the H200: behind torch.compile
])
def test_speedup_vs_compile(speedup, eager, compiled, ref, want_rt, want_x):
    from davinci_kernel.evaluate.harness.baselines import vs_compile

    rt, x = vs_compile(speedup, eager, compiled, ref)
    assert rt == pytest.approx(want_rt, rel=1e-3) and x == pytest.approx(want_x, rel=1e-3)


def test_timing_lead_is_calibrated_and_never_timed():
    """The lead busy-wait is sized from a measured clock rate and sits between the flush
    and the start event: neither the event time nor the wall time (minus flush) holds it."""
    import time

    import torch

    from davinci_kernel.evaluate.shared import timing

    # 2 ms at 1 GHz; a loaded host reads a slower clock (a busy-wait preempted for long):
    # the best of three calibrations, as a descheduled one says nothing about the code
    cycles = max(timing.lead_cycles(_SleepingClock, "cpu", 2000.0) for _ in range(3))  # 2 ms
    assert 200_000 <= cycles <= 2_000_000
    assert timing.lead_cycles(_SleepingClock, "cpu", 0.0) == 0 and timing.lead_cycles(_HostClock, "cpu", 50.0) == 0
    # no whole-GPU flush kernel: fill_ and _sleep
    lead = max((timing._Lead(_SleepingClock, "cpu", 2000.0, sides=1) for _ in range(3)), key=lambda x: x.cycles)
    assert lead.describe() == {"kind": "fill"} and 200_000 <= lead.cycles <= 2_000_000
    _SleepingClock.slept.clear()
    evs = [_SleepingClock.Event() for _ in range(3)]
    flush = torch.empty(16, dtype=torch.int32)
    t0 = time.perf_counter()
    ev_ms, wall_ms, out = timing._timed_call(_SleepingClock, "cpu", lambda x: x + 1, [torch.ones(4)], flush, evs,
                                             time.perf_counter, lead)
    cycles = lead.cycles
    took_ms = (time.perf_counter() - t0) * 1e3
    assert _SleepingClock.slept == [cycles] and took_ms >= 1.0
    assert ev_ms < 1.0 and wall_ms < 1.0 and torch.equal(out, torch.full((4,), 2.0))


def test_flush_and_lead_go_to_the_whole_gpu_kernel_when_there_is_one():
    """With ``C.flush_hold`` the flush and the lead are one launch of it (no fill_, no
    _sleep); with ``hold=False`` or without it, fill_ and _sleep, and the reason is shown."""
    import torch

    from davinci_kernel.evaluate.shared import timing
    from davinci_kernel.evaluate.shared.runtime import build_flush_hold

    hold, why = build_flush_hold(torch, "cuda:0")  # no GPU here: the worker's fallback
    assert hold is None and why

    calls = []

    class Hold:
        def __call__(self, buf, lead_us):
            calls.append((buf.numel(), lead_us))

        def calibrate(self, torch, buf):  # every timing sizes the flush from its own buffer
            calls.append(("calibrate", buf.numel()))

        def describe(self):
            return {"kind": "hold"}

    class Held(_SleepingClock):
        flush_hold = Hold()
        slept: list = []

    lead = timing._Lead(Held, "cpu", 120.0, sides=1)
    lead.queue(torch.zeros(8, dtype=torch.int32))
    assert calls == [(8, 120.0)] and Held.slept == [] and lead.cycles == 0
    assert lead.used_us() == 120.0 and lead.describe() == {"kind": "hold"}
    res = timing.interleaved(Held, "cpu", lambda x: x * 2, lambda x: x + x, [[torch.ones(8)]], iters=3, warmup=1,
                             flush_mb=1, lead_us=timing.AUTO_LEAD)
    assert res["flush"] == {"kind": "hold"} and calls[-1][1] == res["lead_us"] > 0  # sized in warm-up, then used
    assert calls[1] == ("calibrate", (1 << 20) // 4)  # the flush sized from the timing's own buffer first

    class Fallback(_SleepingClock):
        flush_hold, flush_hold_error = None, why

    assert timing._Lead(Fallback, "cpu", 0.0, sides=1).describe() == {"kind": "fill", "why": why}
    off = timing._Lead(Held, "cpu", 0.0, sides=1, hold=False)  # eval.timing_flush: fill
    assert off.describe() == {"kind": "fill"}
    n = len(calls)
    off.queue(torch.zeros(8, dtype=torch.int32))
    assert len(calls) == n


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8",
                                   "uint8", "bool"])
@pytest.mark.parametrize("shape", [(3, 5), (0, 4), (), (7,), (2, 3, 4)])
def test_leaf_files_round_trip(tmp_path, dtype, shape):
    """Worker → file → harness keeps dtype, shape and every bit, also for transposed
    (non-contiguous) and empty tensors; mapped reads give the same."""
    import torch

    from davinci_kernel.evaluate.shared.transfer import read_leaf, write_leaf

    x = (torch.randn(shape) * 10).to(getattr(torch, dtype))
    if x.dim() >= 2:
        x = x.transpose(0, 1)
    meta = write_leaf(torch, x, str(tmp_path / "leaf.bin"))
    assert meta["kind"] == "tensor" and meta["dtype"] == dtype
    for mapped in (False, True):
        y = read_leaf(meta, mapped=mapped)
        assert y.dtype == x.dtype and y.shape == x.shape and torch.equal(y, x)


@pytest.mark.parametrize("numel", [4 * 1024 * 1024 + 1, 16 * 1024 * 1024, 26_224_641, 3 * 1024 * 1024 + 7])
def test_sample_indices_are_stratified_sorted_and_seeded(numel):
    """One index in each of n equal strata (sorted, so gathers are fast); the same seed
    gives the same indices in worker and harness, another seed other indices."""
    import torch

    from davinci_kernel.evaluate.shared.transfer import sample_indices

    n = 1 << 16
    idx = sample_indices(torch, numel, 11, n)
    edges = torch.arange(n + 1, dtype=torch.int64) * numel // n
    assert idx.shape == (n,) and idx.dtype == torch.int64
    assert bool(((idx >= edges[:-1]) & (idx < edges[1:])).all())
    assert torch.equal(idx, sample_indices(torch, numel, 11, n))
    assert not torch.equal(idx, sample_indices(torch, numel, 12, n))


@pytest.mark.parametrize("blocks,sizes,want", [
    ([1.5], [300], 1.5),                               # one placement: its median
    ([2.0, 2.0, 1.0, 1.0], [10, 10, 10, 10], 2 ** 0.5),  # two modes, half each
    ([2.0, 2.0, 2.0, 1.0], [10, 10, 10, 10], 2 ** 0.75),  # three to one: moves by share, does not jump
    ([2.0, 1.0], [30, 10], 2 ** 0.75),                 # weighted by pairs per block
    ([float("inf"), 3.0], [5, 5], 3.0),                # a non-finite block is left out
])
def test_placement_mean(blocks, sizes, want):
    from davinci_kernel.evaluate.shared.timing import placement_mean

    assert placement_mean(blocks, sizes) == pytest.approx(want)


def test_intake_reads_a_sample_of_large_outputs_and_checks_every_file(tmp_path, monkeypatch):
    """The harness's side of a worker's outputs: large ones on the harness's own seed's
    indices, small ones whole; a symlink, a wrong size, a name outside the folder or an
    unknown dtype is refused, never read; files are removed once read."""
    import torch

    from davinci_kernel.evaluate.harness import intake
    from davinci_kernel.evaluate.shared import transfer

    draw = transfer.sample_indices
    monkeypatch.setattr(intake, "SAMPLE_MIN", 2000)
    monkeypatch.setattr(intake, "sample_indices", lambda t, numel, seed: draw(t, numel, seed, n=64))
    a, b = torch.randn(3000), torch.randn(50, 7).to(torch.bfloat16)
    a.numpy().tofile(tmp_path / "1.bin")
    b.view(torch.int16).numpy().tofile(tmp_path / "2.bin")
    secret = tmp_path.parent / "secret.bin"
    torch.ones(4).numpy().tofile(secret)
    (tmp_path / "3.bin").symlink_to(secret)
    torch.ones(5).numpy().tofile(tmp_path / "4.bin")
    metas = [{"kind": "tensor", "dtype": "float32", "shape": [3000], "file": "1.bin"},
             {"kind": "tensor", "dtype": "bfloat16", "shape": [50, 7], "file": "2.bin"},
             {"kind": "tensor", "dtype": "float32", "shape": [4], "file": "3.bin"},
             {"kind": "tensor", "dtype": "float32", "shape": [4], "file": "4.bin"},
             {"kind": "tensor", "dtype": "float32", "shape": [4], "file": "../secret.bin"},
             {"kind": "tensor", "dtype": "Tensor", "shape": [4], "file": "5.bin"},
             {"kind": "scalar", "value": 3}]
    got = intake.read_leaves(str(tmp_path), metas, None, 7)
    assert got[0]["seed"] == 7 and got[0]["full_shape"] == [3000]
    assert torch.equal(got[0]["values"], a[draw(torch, 3000, 7, n=64)])
    assert torch.equal(got[1], b)
    assert [g["kind"] for g in got[2:6]] == ["invalid"] * 4
    assert got[6] == {"kind": "scalar", "value": 3}
    assert secret.exists()
    assert intake.read_leaves(str(tmp_path), metas[:1], os.getuid() + 1, 7)[0]["kind"] == "invalid"  # not the worker's


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16", "int8", "complex64"])
def test_worker_writer_reuses_its_files_and_sizes_them_exactly(tmp_path, monkeypatch, dtype_name):
    """A worker writes the i-th leaf of every output to one file kept mapped: the same size
    again fills the same pages (the same inode); another size or dtype resizes the file to
    exactly its bytes; the harness reads each output as written, odd shapes included."""
    import torch

    from davinci_kernel.evaluate.harness import intake
    from davinci_kernel.evaluate.shared import runtime
    from davinci_kernel.evaluate.shared.runtime import OutputWriter

    monkeypatch.setattr(runtime, "C", runtime.Captured(torch))  # as a worker's start() sets it
    dtype = getattr(torch, dtype_name)

    def make(*shape, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(*shape, generator=g, dtype=torch.float32 if not dtype.is_complex else torch.complex64)
        return (x * 50).to(dtype) if dtype == torch.int8 else x.to(dtype)

    w = OutputWriter(str(tmp_path), reuse=True)
    seen = []
    for seed, shapes in enumerate([[(37, 129), (5,)], [(37, 129), (5,)], [(1, 3, 257), (2, 3)], [(37, 129), (1,)]]):
        out = tuple(make(*s, seed=seed) for s in shapes) + (seed,)
        metas = w.write(out)
        assert [m.get("file") for m in metas[:2]] == ["0.bin", "1.bin"]
        for m, t in zip(metas[:2], out):
            assert (tmp_path / m["file"]).stat().st_size == t.numel() * t.element_size()
        got = intake.read_leaves(str(tmp_path), metas, None, 0)
        assert all(torch.equal(a, b) for a, b in zip(got[:2], out)) and got[2] == {"kind": "scalar", "value": seed}
        seen.append((tmp_path / "0.bin").stat().st_ino)
    assert seen[0] == seen[1]  # the same size: the same file, its pages already there
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.bin", "1.bin"]


@pytest.mark.parametrize("profiled,event,flagged", [(None, 1.0, False), (0.9, 1.0, False), (1.52, 1.0, False),
                                                    (1.6, 1.0, True), (0.05, 0.01, True)])
def test_hidden_work_flag(profiled, event, flagged):
    """More kernel time per call under the profiler than in the timed window: work escaped it."""
    from davinci_kernel.evaluate.harness.guards import hidden_work_flag

    got = hidden_work_flag(profiled, event, 1.5)
    assert bool(got) == flagged and all(name == "side_stream" for name, _ in got)


@pytest.mark.parametrize("streams,ref_streams,flagged", [
    (None, None, False), (0, None, False), (1, None, False), (2, None, True), (5, None, True),
    (2, 1, True), (4, 4, False), (3, 4, False), (5, 4, True), (2, 0, True)])
def test_stream_flag(streams, ref_streams, flagged):
    """GPU work of one call on more streams than the reference's own (profiler; one unless
    a library the reference calls uses several): something ran off the current stream."""
    from davinci_kernel.evaluate.harness.guards import stream_flag

    got = stream_flag(streams, ref_streams)
    assert bool(got) == flagged and all(name == "side_stream" and f"{streams} streams" in why for name, why in got)


@pytest.mark.parametrize("threads,regs,sm_threads,per_sm,fills", [
    (1024, 32, 2048, 2, True),    # H100/H200: 2 x 1024 threads x 32 registers fill an SM
    (1024, 40, 2048, 1, False),   # more registers: one block, half the thread slots free
    (1024, 16, 1536, 1, False),   # an SM of 1,536 threads (Ada) fits only one 1,024-thread block
    (512, 32, 1536, 3, True),     # ... but three of 512
    (256, 24, 2048, 8, True),
    (128, 8, 2048, 16, True),
])
def test_flush_kernel_occupancy(threads, regs, sm_threads, per_sm, fills):
    from davinci_kernel.evaluate.shared.occupy import blocks_per_sm, fills_sm

    got = blocks_per_sm(threads, regs, sm_threads)
    assert got == per_sm and fills_sm(threads, got, sm_threads) is fills


@pytest.mark.parametrize("sm_threads,threads", [(2048, 1024), (1536, 512), (1024, 1024), (640, 128)])
def test_flush_kernel_blocks_tile_the_sm(sm_threads, threads):
    from davinci_kernel.evaluate.shared.occupy import MAX_REGS, block_threads, blocks_per_sm, fills_sm

    assert block_threads(sm_threads) == threads
    assert fills_sm(threads, blocks_per_sm(threads, MAX_REGS, sm_threads), sm_threads)


def _timed(speedup, flags=(), error_msg=None):
    from davinci_kernel.records import EvalResult

    return EvalResult(task="t", trials=5, trials_passed=5, timing_available=True, speedup=speedup, runtime_ms=1.0 / speedup,
                      ref_runtime_ms=1.0, flags=list(flags), error_msg=error_msg, timing_detail={"iters": 100})


@pytest.mark.parametrize("flag", ["timing_mismatch", "reference_slowed"])
@pytest.mark.parametrize("again_flagged", [False, True], ids=["clean-again", "flagged-again"])
def test_a_lone_timing_disagreement_stands_only_if_a_fresh_evaluation_repeats_it(flag, again_flagged):
    """The harness's re-timing rule: a correct candidate flagged only for timings that
    disagree is evaluated once more, its reference timed afresh too; a clean second
    evaluation replaces the timing, a flagged one keeps the first."""
    from davinci_kernel.evaluate.harness import retry

    again = _timed(1.9, [flag], f"{flag}: again") if again_flagged else _timed(1.31)
    remeasured = []

    def fresh(salt):
        assert salt != 0  # new inputs, drawn afresh
        assert remeasured == ["task"]  # the reference's clean time is taken again first
        return again

    res = _timed(1.3, [flag], f"{flag}: the first evaluation's message")
    retry.second_opinions(res, fresh, implausible=10.0, remeasure=lambda: remeasured.append("task"))
    if again_flagged:
        assert res.flags == [flag] and res.speedup == 1.3
        assert "again in a fresh sandbox" in res.error_msg
    else:
        assert res.flags == [] and res.error_msg is None and res.speedup == 1.31
        assert "did not recur" in res.warnings[0]



def test_a_remeasured_baseline_holds_the_reference_to_its_fresh_time(tmp_path):
    """The stored baseline is checked against a fresh eager timing once per evaluator, and
    again after ``remeasure``; where the two agree within 25 % the fresh time is what the
    reference beside a candidate is held to (``eager_ms_now``), the stored eager time stays
    beside its compile time; where they disagree, everything is measured again and stored."""
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate.harness.baselines import BaselineCache
    from davinci_kernel.evaluate.harness.trusted import TrustedSide
    from davinci_kernel.evaluate.shared.protocol import TimingSettings
    from davinci_kernel.tasks import load_task_file

    path = tmp_path / "t.py"
    path.write_text("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n"
                    "def get_inputs():\n    return [torch.ones(4)]\n\ndef get_init_inputs():\n    return []\n")
    task = load_task_file(path)
    cache = BaselineCache(str(tmp_path / "cache"))
    side = TrustedSide(EvalConfig(device="cpu", cache_dir=str(tmp_path / "cache")), None, None, TimingSettings(),
                       None, cache)
    side.device_info = lambda device: ("GPU", "torch")
    answers = iter([{"eager_ms": 2.0, "compile_ms": 1.0}, {"eager_ms": 2.3}, {"eager_ms": 4.0},
                    {"eager_ms": 4.1, "compile_ms": 2.0}])
    asked = []

    def ask(device, cmd, job):
        asked.append(job.timing.baseline_compile)
        return next(answers)

    side.ask = ask
    first = side.baseline(task, task.source, {}, [1, 2, 3], "cuda:0")
    assert first["eager_ms"] == 2.0 and "eager_ms_now" not in first
    assert side.baseline(task, task.source, {}, [1, 2, 3], "cuda:0") is not None and len(asked) == 1  # checked
    side.remeasure(task)
    again = side.baseline(task, task.source, {}, [1, 2, 3], "cuda:0")  # 2.3 agrees with 2.0 within 25 %
    assert (again["eager_ms"], again["eager_ms_now"], again["compile_ms"]) == (2.0, 2.3, 1.0)
    side.remeasure(task)
    third = side.baseline(task, task.source, {}, [1, 2, 3], "cuda:0")  # 4.0 disagrees: all measured again
    assert (third["eager_ms"], third["compile_ms"]) == (4.1, 2.0) and "eager_ms_now" not in third
    assert asked == [True, False, False, True]  # re-checks time eager only
    key = BaselineCache.key(task.hash, {}, "GPU", "torch", TimingSettings().method_extra())
    assert cache.get(key)["eager_ms"] == 4.1


def test_a_self_check_is_re_timed_once_its_waived_flags_are_gone(tmp_path):
    """Self-check: the custom-kernel flags the reference always gets are waived before the
    re-timing rule looks, on both evaluations, so a lone timing disagreement is measured again."""
    from types import SimpleNamespace

    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate.harness.evaluator import Evaluator

    calls = []

    class Trusted:
        def remeasure(self, task):
            calls.append("remeasure")

    class Harness:
        cfg = EvalConfig(device="cpu", self_check=True)
        trusted = Trusted()
        _judged = Evaluator._judged

        def _evaluate(self, task, source, salt):
            calls.append(salt)
            flags = ["no_custom_kernel", "low_coverage"] + (["timing_mismatch"] if salt == 0 else [])
            return _timed(1.0 if salt else 0.98, flags, "; ".join(f"{f}: why" for f in flags))

    res = Harness()._judged(SimpleNamespace(name="t", level=1), "src", 0.0)
    assert calls == [0, "remeasure", 1]
    assert res.correct and res.flags == [] and res.speedup == 1.0 and res.self_check
    assert any("did not recur" in w for w in res.warnings)


@pytest.mark.parametrize("ref_ms,clean_ms,gpu_ms,flagged", [
    (2.0, 3.8, 0.9, False),   # host-bound (GPU busy 24 %): a faster host beside the candidate is no forgery
    (0.6, 3.8, 0.9, True),    # ... but faster than its own kernels' GPU time is
    (2.0, 3.8, None, True),   # GPU time unknown (an older baseline): the process-to-process rule
    (2.0, 3.8, 3.5, True),    # GPU-bound (92 %): the reference process's time is the floor
    (3.0, 3.8, 3.5, False),   # within 1.3x of it
])
def test_the_floor_of_a_reported_reference_time(ref_ms, clean_ms, gpu_ms, flagged):
    """A reference reported faster than it runs is flagged against its time in the reference
    process, or, where that time is mostly the host launching it (host-bound), against the
    GPU time of its own kernels, which no faster host shortens."""
    from davinci_kernel.evaluate.harness import guards

    got = guards.reference_time_flag(ref_ms, clean_ms, 1.3, gpu_ms)
    assert bool(got) == flagged, got
    assert guards.host_bound(clean_ms, gpu_ms) == (gpu_ms is not None and gpu_ms < 0.7 * clean_ms)
    # the other direction (a reference reported slower) is held to the reference process's time either way
    assert guards.reference_slowed_flag(1.5 * clean_ms, clean_ms, 1.3)
