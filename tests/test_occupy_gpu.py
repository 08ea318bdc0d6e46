"""The whole-GPU flush kernel (occupy.py) on a real GPU: it fits at once and holds every SM."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def hold():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from davinci_kernel.evaluate.shared.occupy import FlushHold

    h = FlushHold(torch, "cuda")
    buf = torch.empty(64 << 20, dtype=torch.int32, device="cuda")
    h.self_check(torch, buf)
    return h, buf


def test_all_blocks_fit_at_once(hold):
    h, buf = hold
    d = h.describe()
    assert d["fills_sms"] and d["blocks"] == h.sms * h.per_sm and d["regs"] <= 32, d
    assert d["start_spread_us"] < 20.0, d  # every block started together: none waited for an SM
    assert bool((buf == 1).all())  # and the flush wrote the whole buffer


def _side_finishes_after(torch, queue_flush) -> tuple[float, float]:
    """Queue the flush and lead, then a ~20 us kernel on a high-priority side stream; return
    (when the lead ended, when the side kernel ended), in ms after the flush began."""
    side = torch.cuda.Stream(priority=-1)
    x = torch.randn(4 << 20, device="cuda")
    a, lead_end, side_end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    torch.cuda.synchronize()
    a.record()
    queue_flush()
    lead_end.record()
    with torch.cuda.stream(side):
        x.mul_(1.0001)
        side_end.record()
    torch.cuda.synchronize()
    return a.elapsed_time(lead_end), a.elapsed_time(side_end)


def test_side_stream_work_waits_for_the_hold(hold):
    """A kernel on another stream, launched while the flush and a 300 us lead run, cannot
    start before they end; beside fill_ plus a one-thread _sleep it finishes long before."""
    import torch

    from davinci_kernel.evaluate.shared import timing
    from davinci_kernel.evaluate.shared.runtime import Captured as _capture

    h, buf = hold
    held = [_side_finishes_after(torch, lambda: h(buf, 300.0)) for _ in range(5)]
    assert all(side >= lead for lead, side in held), held
    C = _capture(torch)
    cycles = timing.lead_cycles(C, torch.device("cuda"), 300.0)
    free = [_side_finishes_after(torch, lambda: (buf.fill_(1), torch.cuda._sleep(cycles))) for _ in range(5)]
    assert all(side < lead for lead, side in free), free  # the control: without the hold it runs beside


def test_lead_is_held_for_its_length(hold):
    """The kernel lasts the flush allowance plus the lead: 500 us more lead, 0.5 ms more."""
    import torch

    h, buf = hold
    ms = {}
    for lead_us in (0.0, 500.0, 0.0, 500.0, 0.0, 500.0):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        h(buf, lead_us)
        b.record()
        torch.cuda.synchronize()
        ms.setdefault(lead_us, []).append(a.elapsed_time(b))
    base = h.flush_ns(buf.numel()) / 1e6  # the deadline with no lead (event times add the launch)
    assert all(t >= base for t in ms[0.0]), (base, ms)
    assert 0.45 <= min(ms[500.0]) - min(ms[0.0]) <= 0.6, (base, ms)
