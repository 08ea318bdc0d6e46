"""Adaptive timing (``eval.timing_ci_target``): ``timing.interleaved`` times more placement
blocks until the speedup's interval is narrow enough or its budget runs out; the compared
round stays last and the timed checks keep their count."""

import time

import torch

from davinci_kernel.evaluate.shared import timing


class _TickClock:
    """A host clock that advances 1 ms per reading: the time budget spent is the same on any machine."""

    now = 0.0

    @classmethod
    def perf(cls) -> float:
        cls.now += 1e-3
        return cls.now


class _HostClock:
    """Test double for the worker's captured CUDA calls (only inside this file): events read the
    host clock; ``perf`` (the budget's and the wall time's clock) ticks."""

    perf = staticmethod(_TickClock.perf)
    Tensor = torch.Tensor
    torch = torch

    class Event:
        def __init__(self, enable_timing=True):
            self.t = 0.0

    @staticmethod
    def record(ev):
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


def _run(target: float, budget_s: float):
    sets = [[torch.randn(64)], [torch.randn(64)]]
    return timing.interleaved(_HostClock, "cpu", lambda x: x * 2, lambda x: x + x, sets, iters=12, warmup=1,
                              flush_mb=1, placements=3, reclone=lambda a: [t.clone() for t in a],
                              checks=[(0.3, 77)], ci_target=target, ci_budget_s=budget_s), sets


def test_adaptive_timing_adds_blocks_until_its_budget_and_keeps_the_compared_round_last():
    res, sets = _run(1e-12, 0.1)  # a target no host clock meets: it times until the budget is spent
    assert res["planned_iters"] == 12 and res["iters"] > 12 and res["iters"] % 4 == 0
    assert res["placements"] == len(res["pair_blocks"]) == res["iters"] // 4
    assert sum(len(b) for b in res["pair_blocks"]) == res["iters"]
    assert set(res["checked_outputs"]) == {(0, 1)} and set(res["last_outputs"]) == {0, 1}  # round 3: set 1
    for k, out in res["last_outputs"].items():  # the last round still ran on the sets as they are
        torch.testing.assert_close(out, sets[k][0] * 2)


def test_adaptive_timing_off_or_met_times_the_planned_pairs():
    for target in (0.0, 100.0):  # off; met at once
        res, _ = _run(target, 5.0)
        assert res["iters"] == res["planned_iters"] == 12 and res["placements"] == 3
