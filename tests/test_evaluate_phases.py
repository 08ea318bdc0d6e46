"""Phases of one evaluation that run beside each other: the clean baseline is measured
beside the candidate's checks, waited for before timing and always before the evaluation's
admission ends."""

from __future__ import annotations

import threading
import time

import pytest

from davinci_kernel.config import EvalConfig
from davinci_kernel.evaluate import Evaluator

_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2


def get_inputs():
    return [torch.randn(32, 40)]


def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    from davinci_kernel.tasks import load_task_file

    path = tmp_path_factory.mktemp("task") / "tanh2.py"
    path.write_text(_TASK)
    return load_task_file(path)


def test_the_baseline_is_measured_beside_the_checks_and_waited_for(task, tmp_path, monkeypatch):
    """A timed device's baseline (here a slow double on the CPU) starts before the candidate's
    job, on another thread, while the worker checks; the evaluation returns only once it
    has ended (its memory belongs to the evaluation's admission)."""
    cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path), self_check=True, trials=2, perturb_shapes=False)
    with Evaluator(cfg, workers=1) as ev:
        seen: dict = {}
        sent = threading.Event()

        def baseline(t, variant, overrides, seeds, device):
            seen["thread"] = threading.current_thread().name
            seen["seeds"] = list(seeds)
            seen["beside"] = sent.wait(30)  # the job goes to the worker while the baseline is measured
            time.sleep(0.3)
            seen["done"] = time.monotonic()
            return {"eager_ms": 1.0}

        from davinci_kernel.evaluate.harness.isolation.procs import WorkerProcess

        orig = WorkerProcess.send

        def send(w, msg):
            if msg.get("cmd") == "job":
                sent.set()
            return orig(w, msg)

        monkeypatch.setattr(WorkerProcess, "send", send)
        monkeypatch.setattr(ev, "_wants_baseline", lambda: True)
        monkeypatch.setattr(ev.trusted, "baseline", baseline)
        res = ev.evaluate(task)
        end = time.monotonic()
    assert res.correct and seen["beside"] and seen["thread"].startswith("dvk-baseline") and len(seen["seeds"]) == 2
    assert seen["done"] <= end  # waited for before the evaluation ended
