"""Admission by bytes: evaluations on one device never promise more memory than it has.

Ledger semantics (pure threads), the sizes a reference process reports (meta device, or a
real first trial where the meta device cannot run the problem), and an evaluator whose
ledger is too small for two evaluations at once: they run one after the other, both
correct. The same on a real GPU, with tasks of 12 % of its memory each, is in
``test_evaluate_gpu.py``."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from davinci_kernel.evaluate.harness import admission
from davinci_kernel.evaluate.harness.admission import MemoryLedger
from davinci_kernel.evaluate.shared import memplan

FIXTURES = Path(__file__).parent / "fixtures"


def _wait_until(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        time.sleep(0.005)


def test_holds_that_fit_together_overlap():
    ledger = MemoryLedger(100)
    inside = threading.Barrier(3, timeout=5)

    def one():
        with ledger.hold(30) as got:
            assert got == 30
            inside.wait()  # all three inside at once, or this times out

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert ledger.state() == (0, 0, 0) and ledger.most_holders == 3


def test_a_hold_that_does_not_fit_waits_for_the_bytes():
    ledger = MemoryLedger(100)
    release = threading.Event()
    log = []

    def first():
        with ledger.hold(70):
            log.append("first in")
            release.wait(5)
            log.append("first out")

    def second():
        with ledger.hold(40):
            log.append("second in")

    a = threading.Thread(target=first)
    a.start()
    _wait_until(lambda: log == ["first in"])
    b = threading.Thread(target=second)
    b.start()
    _wait_until(lambda: ledger.state() == (70, 1, 1))  # the second waits: 70 + 40 > 100
    assert log == ["first in"]
    release.set()
    a.join(5)
    b.join(5)
    assert log == ["first in", "first out", "second in"] and ledger.most_holders == 1


@pytest.mark.parametrize("need", [None, 100, 250])
def test_unknown_or_too_large_runs_alone_with_everything(need):
    ledger = MemoryLedger(100)
    assert ledger.grant_for(need) == 100
    small_in = threading.Event()
    release = threading.Event()

    def small():
        with ledger.hold(1):
            small_in.set()
            release.wait(5)

    s = threading.Thread(target=small)
    s.start()
    small_in.wait(5)
    got, seen, done = [], [], threading.Event()

    def big():
        with ledger.hold(need) as g:
            got.append(g)
            seen.append(ledger.state())
            done.wait(5)

    b = threading.Thread(target=big)
    b.start()
    time.sleep(0.1)
    assert got == []  # waits for the small one, however little it holds
    release.set()
    s.join(5)
    _wait_until(lambda: got)
    done.set()
    b.join(5)
    assert got == [100] and seen == [(100, 1, 0)] and ledger.alone == 1


def test_a_large_waiter_is_not_starved_by_small_ones():
    """First come, first served: once a large hold waits, later small ones queue behind it."""
    ledger = MemoryLedger(100)
    order = []
    stop_first = threading.Event()

    def hold(name, need, until=None):
        with ledger.hold(need):
            order.append(name)
            if until is not None:
                until.wait(5)

    first = threading.Thread(target=hold, args=("small1", 10, stop_first))
    first.start()
    _wait_until(lambda: order == ["small1"])
    big = threading.Thread(target=hold, args=("big", 95))
    big.start()
    _wait_until(lambda: ledger.state()[2] == 1)
    late = threading.Thread(target=hold, args=("small2", 10))  # would fit beside small1, but big came first
    late.start()
    _wait_until(lambda: ledger.state()[2] == 2)
    assert order == ["small1"]
    stop_first.set()
    for t in (first, big, late):
        t.join(5)
    assert order == ["small1", "big", "small2"]


def test_capacity_leaves_a_context_per_other_process():
    g = memplan.GiB
    assert admission.capacity(100 * g, 1) == 99 * g  # the margin alone
    assert admission.capacity(100 * g, 13) == 100 * g - 12 * g - g
    assert admission.capacity(2 * g, 50) == admission.CONTEXT_BYTES  # never below one context's worth


# ----------------------------------------------------------------------------- with processes
_SIZABLE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x).to(torch.float16)


def get_inputs():
    return [torch.randn(64, 48)]


def get_init_inputs():
    return []
'''

_UNSIZABLE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Scales by the input's own sum: data-dependent, so the meta device cannot run it."""

    def forward(self, x):
        return x * (float(x.sum()) > -1e30)


def get_inputs():
    return [torch.randn(64, 48)]


def get_init_inputs():
    return []
'''


# moves its inputs in get_inputs, as KernelBench's examples do with .cuda(): a meta tensor
# cannot be copied out, a fake one can
_MOVED = _SIZABLE.replace("def get_inputs():\n    return [torch.randn(64, 48)]",
                          "def get_inputs():\n    return [torch.randn(64, 48).to('cpu')]")


@pytest.fixture(scope="module")
def cpu_evaluator(tmp_path_factory):
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    # the problem's own Model as the candidate: these tests are about admission, not kernels
    cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path_factory.mktemp("cache")), self_check=True,
                     perturb_shapes=False, trials=2)
    with Evaluator(cfg, workers=2) as ev:
        yield ev


def _task(tmp_path, name, text):
    from davinci_kernel.tasks import load_task_file

    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return load_task_file(path)


def test_sizes_come_from_the_meta_device_or_the_first_trial(cpu_evaluator, tmp_path):
    ev = cpu_evaluator
    sizable = _task(tmp_path, "sizable", _SIZABLE)
    assert ev.trusted.sizes(sizable.source, "cpu") == (64 * 48 * 4, 64 * 48 * 2, 0)  # float32 in, float16 out

    moved = _task(tmp_path, "moved", _MOVED)
    assert moved.source != sizable.source
    assert ev.trusted.sizes(moved.source, "cpu") == (64 * 48 * 4, 64 * 48 * 2, 0)  # under fake tensors

    task = _task(tmp_path, "unsizable", _UNSIZABLE)
    assert ev.trusted.sizes(task.source, "cpu") is None
    ledger = ev.memory("cpu")
    alone = ledger.alone
    res = ev.evaluate(task)
    assert res.correct, (res.error_kind, res.error_msg, res.flags)
    assert ledger.alone == alone + 1  # unknown size: it ran alone
    assert ev.trusted.sizes(task.source, "cpu") == (64 * 48 * 4, 64 * 48 * 4, 0)  # learnt from the real trial
    assert ev.evaluate(task).correct
    assert ledger.alone == alone + 1  # known now: admitted by its bytes


def test_two_evaluations_too_large_to_share_run_one_after_the_other(cpu_evaluator, tmp_path):
    """A ledger with room for one evaluation of the task at a time: two candidates given at
    once are both judged correct, never inside the ledger together."""
    ev = cpu_evaluator
    task = _task(tmp_path, "sizable", _SIZABLE)
    i, o, p = ev.trusted.sizes(task.source, "cpu")
    need = memplan.bound(i, o, fixed=64 << 20, param_bytes=p)
    saved = ev.memory
    ev.memory = admission.Ledgers(lambda device: int(1.5 * need))
    try:
        # two texts (a batch judges one text once): in a self-check both are the problem's own Model
        results = ev.evaluate_many([(task, None), (task, "# another candidate's text\n")])
        ledger = ev.memory("cpu")
    finally:
        ev.memory = saved
    assert all(r.correct for r in results), [(r.error_kind, r.error_msg, r.flags) for r in results]
    assert ledger.most_holders == 1 and ledger.state() == (0, 0, 0)
    assert all("admission" in r.phase_seconds for r in results)


_OOM_CANDIDATE = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        keep = [torch.ones(64 << 20) for _ in range(40)]  # 10 GiB: past the worker's memory limit
        return x + keep[0][0]
'''


def test_out_of_memory_beside_others_is_judged_again_alone(tmp_path):
    """Memory no plan counts (weights, intermediates, workspaces, a neighbour still tearing
    down) can run out while other evaluations hold their share: such a verdict is given only
    after a second evaluation alone on the device, and the result says so. The out-of-memory
    is the harness's own knowledge (the worker's cgroup recorded the OOM kill), never the
    candidate's words. The candidate here runs out of memory every time, so it stays a failure."""
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    task = _task(tmp_path, "sizable", _SIZABLE)
    cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path / "cache"), perturb_shapes=False, trials=2,
                     worker_memory_gb=2)
    with Evaluator(cfg, workers=2) as ev:
        res = ev.evaluate(task, _OOM_CANDIDATE)
        ledger = ev.memory("cpu")
        if "cgroup" not in (res.sandbox or "").split(","):
            pytest.skip("no worker cgroup here: the OOM kill cannot be seen from outside the worker")
        assert ledger.alone == 1 and ledger.state() == (0, 0, 0)
    assert not res.correct and res.error_kind == "worker_crash", (res.error_kind, res.error_msg)
    assert "out of host memory" in res.error_msg
    assert [w for w in res.warnings if w.startswith("out_of_memory_beside_others: ")], res.warnings


_WEIGHTY = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer and a buffer: its weights count, not only its inputs and outputs."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(96, 40)
        self.register_buffer("scale", torch.ones(40, dtype=torch.float64))

    def forward(self, x):
        return self.fc(x) * self.scale.float()


def get_inputs():
    return [torch.randn(8, 96)]


def get_init_inputs():
    return []
'''

# 2**36 float32 parameters (256 GiB) that the model never touches: more than any host here
_HUGE = _WEIGHTY.replace("self.fc = nn.Linear(96, 40)",
                         "self.fc = nn.Linear(96, 40)\n        self.table = nn.Parameter(torch.empty(1 << 36))")


def test_a_models_weights_count_in_its_sizes_and_admission(cpu_evaluator, tmp_path):
    """KernelBench's MLPs hold gigabytes of weights beside small inputs (level 3's
    ShallowWideMLP: 8 GB), and a worker holds three copies (the problem's Model, the
    candidate, and the candidate at the perturbed size). Sizes count parameters and buffers; a model too large for the host is
    refused up front in one line, before anything is allocated, never OOM-killed."""
    ev = cpu_evaluator
    task = _task(tmp_path, "weighty", _WEIGHTY)
    assert ev.trusted.sizes(task.source, "cpu") == (8 * 96 * 4, 8 * 40 * 4, (96 * 40 + 40) * 4 + 40 * 8)
    assert memplan.bound(100, 50, fixed=7, param_bytes=1000) == 4 * 150 + 3 * 1000 + 7
    # one trial of 10 B in, 10 B out: 30 B; three model copies beside it
    assert memplan.least_need(10, 10, param_bytes=324) == 1002 and memplan.least_need(10, 10, param_bytes=323) == 999
    assert ev.evaluate(task).correct

    huge = _task(tmp_path, "huge", _HUGE)
    res = ev.evaluate(huge)
    assert not res.correct and res.stage == "reference" and res.error_kind == "too_large", (res.error_kind,
                                                                                             res.error_msg)
    assert "parameters and buffers 3 x 256.0 GiB" in res.error_msg and len(res.error_msg.splitlines()) == 1


_GROWS = '''import torch
import torch.nn as nn

PERTURB = ["dim"]
dim = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.randn(2, dim)]


def get_init_inputs():
    return []
'''


def test_a_perturbed_size_whose_weights_outgrow_the_task_is_passed_over(tmp_path):
    """The shape re-check's sizes stay within the task's memory, weights included: making
    ``dim`` larger keeps the inputs tiny but the 64 MiB weight 9 x larger, so the reference
    takes the next variant (smaller) instead of a model the task's admission never counted."""
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator
    from davinci_kernel.evaluate.harness.draws import draw
    from davinci_kernel.evaluate.harness.evaluator import _variant
    from davinci_kernel.tasks.shapes import size_choices

    task = _task(tmp_path, "grows", _GROWS)
    overrides, variant, perturb = _variant(task.source, False, True)
    assert perturb["judged"][0] == {"dim": 4352}  # the nearest larger multiple of 4096's tile (256)
    # a draw whose larger dim makes the weight more than 1.25 x the task's (and 64 MiB): dim > 4579
    drawn = next(d for s in range(100) if (d := draw(task.hash, 1, variant, [], input_seed=s)).perturb[0]["dim"] > 4608)
    cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path / "cache"), cpu_small_shapes=False, trials=1)
    with Evaluator(cfg, workers=1) as ev:
        entry = ev.trusted.reference(task, variant, overrides, drawn, "cpu")
    assert "error" not in entry, entry.get("error")
    assert entry["perturb_used"] == drawn.perturb[-1] and entry["perturb_used"]["dim"] in size_choices(4096, False)
