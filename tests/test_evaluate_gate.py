"""The per-GPU gate: checks run side by side, timing runs alone (the checks' processes
stopped meanwhile), and a waiting timer is not starved by a stream of checks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from davinci_kernel.evaluate.harness.gate import DeviceGate, Gates


def _wait_until(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not reached")
        time.sleep(0.005)


def test_shared_holders_overlap():
    gate = DeviceGate()
    inside = threading.Barrier(3, timeout=5)

    def check():
        with gate.shared():
            inside.wait()  # all three are inside at once, or this times out

    threads = [threading.Thread(target=check) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert gate.state() == (0, False, 0)


def test_exclusive_waits_for_checks_and_blocks_new_ones():
    gate = DeviceGate()
    log = []
    release_first = threading.Event()

    def first_check():
        with gate.shared():
            log.append("check1 in")
            release_first.wait(5)
            log.append("check1 out")

    def timer():
        with gate.exclusive():
            log.append("time in")
            time.sleep(0.05)
            log.append("time out")

    def second_check():
        with gate.shared():
            log.append("check2 in")

    a = threading.Thread(target=first_check)
    a.start()
    _wait_until(lambda: gate.state()[0] == 1)
    b = threading.Thread(target=timer)
    b.start()
    _wait_until(lambda: gate.state()[2] == 1)  # the timer waits behind the running check
    c = threading.Thread(target=second_check)
    c.start()
    time.sleep(0.05)
    assert "check2 in" not in log  # writer preference: no new check while a timer waits
    release_first.set()
    for t in (a, b, c):
        t.join(5)
    assert log == ["check1 in", "check1 out", "time in", "time out", "check2 in"]
    assert gate.state() == (0, False, 0)


class _Sleeper:
    """A real process the gate can stop: SIGSTOP / SIGCONT, nested like WorkerProcess's."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])
        self.depth = 0

    def freeze(self):
        self.depth += 1
        if self.depth == 1:
            os.kill(self.proc.pid, signal.SIGSTOP)
            _wait_until(lambda: self.state() == "T")

    def thaw(self):
        self.depth -= 1
        if self.depth == 0:
            os.kill(self.proc.pid, signal.SIGCONT)

    def state(self):
        with open(f"/proc/{self.proc.pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]


def test_a_timer_stops_running_checks_instead_of_waiting_for_them():
    gate = DeviceGate()
    checks = [_Sleeper(), _Sleeper()]
    release = threading.Event()
    seen = []

    def check(p):
        with gate.shared(p):
            release.wait(10)

    threads = [threading.Thread(target=check, args=(p,)) for p in checks]
    try:
        for t in threads:
            t.start()
        _wait_until(lambda: gate.state()[0] == 2)
        with gate.exclusive():  # at once: the checks still run, but their processes are stopped
            seen = [p.state() for p in checks]
            assert gate.state() == (2, True, 0)
        _wait_until(lambda: all(p.state() in ("S", "R") for p in checks))
        assert seen == ["T", "T"] and gate.stops == 2
    finally:
        release.set()
        for t in threads:
            t.join(5)
        for p in checks:
            p.proc.kill()
            p.proc.wait()
    assert gate.state() == (0, False, 0)


def test_gate_is_released_when_the_body_raises():
    gate = DeviceGate()
    with pytest.raises(RuntimeError):
        with gate.exclusive():
            raise RuntimeError("worker died")
    with pytest.raises(RuntimeError):
        with gate.shared():
            raise RuntimeError("worker died")
    assert gate.state() == (0, False, 0)
    with gate.exclusive():
        assert gate.state() == (0, True, 0)


def test_one_gate_per_device():
    gates = Gates()
    assert gates("cuda:0") is gates("cuda:0")
    assert gates("cuda:0") is not gates("cuda:1")
    assert gates("") is gates("cpu")


@pytest.mark.parametrize("per_gpu,workers,n_gpu,want", [
    (1, None, 2, ["cuda:0", "cuda:1"]),
    (2, None, 2, ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]),
    (2, 3, 2, ["cuda:0", "cuda:1", "cuda:0"]),  # --workers wins over the per-GPU default
    (3, None, 1, ["cuda:0"] * 3),
])
def test_default_slots_per_gpu(monkeypatch, per_gpu, workers, n_gpu, want):
    import torch

    from davinci_kernel.evaluate.harness import pool

    monkeypatch.setattr(torch.cuda, "device_count", lambda: n_gpu)
    monkeypatch.setattr(pool, "resolve_device", lambda d: "cuda")
    assert pool.default_slots("cuda", workers, per_gpu) == want


class _Held:
    """A stand-in process: counts how often it is stopped (nesting like a worker's)."""

    def __init__(self):
        self.depth = self.stops = 0

    def freeze(self):
        self.depth += 1
        self.stops += 1

    def thaw(self):
        self.depth -= 1


def test_a_timer_becomes_a_shared_holder_as_its_block_ends():
    """``exclusive(then_share=p)``: as the timed block ends, ``p`` is a shared holder in the
    same step, so the next timer stops it (its profile and outputs run beside checks, never
    beside a timer) until it leaves."""
    gate, p = DeviceGate(), _Held()
    with gate.exclusive(then_share=p):
        assert gate.state() == (0, True, 0)
    assert gate.state() == (1, False, 0) and p.depth == 0
    with gate.exclusive():  # the next timer
        assert p.depth == 1
    assert p.depth == 0 and p.stops == 1
    gate.leave(p)
    assert gate.state() == (0, False, 0)
    with pytest.raises(RuntimeError):  # a body that raises hands over too: the caller leaves
        with gate.exclusive(then_share=p):
            raise RuntimeError("worker died")
    assert gate.state() == (1, False, 0)
    gate.leave(p)
    assert gate.state() == (0, False, 0)


def test_the_timing_conversation_hands_the_gpu_back_when_the_timed_calls_end():
    """The harness holds the GPU alone for a worker from its go to its ``timed_end``; its
    profile (``profiled``) and outputs come while it is a shared holder (another timer stops
    it), and it leaves the gate at the end. The wall time is still taken between the start
    and the end the worker announced."""
    from types import SimpleNamespace

    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate.harness.conversation import Conversation
    from davinci_kernel.records import EvalResult

    gates = Gates()
    gate = gates("cuda:0")
    seen = {}

    class Worker(_Held):
        device, scratch, uid = "cuda:0", "/nonexistent", None

        def __init__(self):
            super().__init__()
            self.script = ["seed?", "timing_ready", "timed_start", "timed_end", "profiled", "timed"]
            self.sent = []

        def send(self, msg):
            self.sent.append(msg.get("cmd"))

        def recv(self, timeout=None):
            ev = self.script.pop(0)
            seen[ev] = gate.state()
            if ev == "seed?":
                return {"event": "seed", "i": 0}
            if ev == "timed_end":
                time.sleep(0.02)
            return {"event": ev, "result": {"timing": {}}} if ev == "timed" else {"event": ev}

    w = Worker()
    ev = SimpleNamespace(cfg=EvalConfig(device="cpu"), _gates=gates)
    drawn = SimpleNamespace(trial_seeds=[7], call_seed=lambda i: 11, timed_checks=[(0.5, 3)], check_call_seeds=[13])
    clock = SimpleNamespace(marks=[], mark=lambda name: clock.marks.append(name))
    talk = Conversation(ev, w, EvalResult(task="t"), drawn, {"sample_seed": 1, "output_bytes": 64}, clock)
    tout, wall_ms = talk.time()
    assert tout == {"timing": {}} and wall_ms is not None and wall_ms >= 15
    assert w.sent == ["time", "seed", "go"]
    assert seen["timed_start"] == (0, True, 0) and seen["timed_end"] == (0, True, 0)  # alone while timed
    assert seen["profiled"] == (1, False, 0) and seen["timed"] == (1, False, 0)  # beside checks after
    assert gate.state() == (0, False, 0) and w.depth == 0
    assert clock.marks == ["timing", "gate", "timing", "profile", "timing_outputs"]
