"""The retry rules' out-of-memory test (harness/retry.py) reads what the harness knows,
never a candidate's own words; outputs are bounded by the reference's size (conversation.py)."""

from __future__ import annotations

import resource

import pytest
from conftest import FIXTURES, fixture_task

from davinci_kernel.evaluate.harness.isolation.procs import HOST_OOM_NOTE
from davinci_kernel.evaluate.harness.retry import out_of_memory
from davinci_kernel.records import EvalResult


@pytest.mark.parametrize("device,kind,msg,oom", [
    ("cpu", "runtime_error", "Traceback ... MemoryError: out of memory", False),
    ("cpu", "runtime_error", "torch.OutOfMemoryError: CUDA out of memory", False),
    ("cpu", "runtime_error", f"{HOST_OOM_NOTE} (the worker's memory limit)", True),
    ("cpu", "too_large", "the problem needs more memory than the device has", True),
    ("cuda", "runtime_error", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB", True),
    ("cuda", "runtime_error", "MemoryError", False),
    ("cuda", None, "CUDA out of memory", False),
])
def test_out_of_memory_is_what_the_harness_knows(device, kind, msg, oom):
    res = EvalResult(task="t", level=1, device=device, backend="triton", error_kind=kind, error_msg=msg)
    assert out_of_memory(res) is oom


def test_a_claimed_memory_error_is_judged_once(cpu_evaluator):
    src = (FIXTURES / "cheats" / "sandbox_oom_claim.py").read_text()
    res = cpu_evaluator.evaluate(fixture_task("relu"), src)
    assert res.correct is False and res.error_kind == "runtime_error"
    assert not any(w.startswith("out_of_memory_beside_others") for w in res.warnings), res.warnings


def test_outputs_far_larger_than_the_reference_are_not_read(cpu_evaluator):
    src = (FIXTURES / "cheats" / "sandbox_big_outputs.py").read_text()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res = cpu_evaluator.evaluate(fixture_task("relu"), src)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert res.correct is False
    assert grown_mb < 200, f"the harness grew by {grown_mb:.0f} MB reading a candidate's outputs"
