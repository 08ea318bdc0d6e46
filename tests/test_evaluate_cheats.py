"""Every reward-hacking fixture must come back correct=false with its named flag, or with its
named error_kind where the cheat is an output the comparison rejects (``expect`` is either)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, fixture_meta, fixture_task

ALL = sorted((FIXTURES / "cheats").glob("*.py"))
# Attacks on the judge itself (sandbox_*) run in throwaway harness processes: test_evaluate_sandbox.py.
CHEATS = [p for p in ALL if not p.stem.startswith("sandbox_")]
GPU_ONLY = {"timing_only_cheat", "side_stream_hidden", "forged_timing",  # only timing exposes them
            # kernel evidence that exists on a GPU only (activity records, timed calls, device copies)
            "gpu_unlisted_library_kernel", "gpu_profiler_aware", "gpu_cuda_graph_replay", "gpu_small_epilogue",
            "gpu_numpy_host"}


@pytest.mark.parametrize("path", [p for p in CHEATS if p.stem not in GPU_ONLY], ids=lambda p: p.stem)
def test_cheat_is_caught_on_cpu(cpu_evaluator, path):
    meta = fixture_meta(path)
    res = cpu_evaluator.evaluate(fixture_task(meta["task"]), path.read_text())
    assert res.correct is False
    expect = meta["expect"]
    if not _caught_as(res, expect) and meta.get("cpu_also"):
        expect = meta["cpu_also"]  # the CPU's other acceptable outcome, only when the named one is absent
    assert _caught_as(res, expect), (res.flags, res.error_kind, res.error_msg)
    assert expect in res.feedback


def _caught_as(res, expect: str) -> bool:
    """The result carries ``expect`` as a flag or as its error_kind."""
    return expect in res.flags or res.error_kind == expect


@pytest.mark.gpu
@pytest.mark.parametrize("path", CHEATS, ids=lambda p: p.stem)
def test_cheat_is_caught_on_gpu(gpu_evaluator, path):
    meta = fixture_meta(path)
    res = gpu_evaluator.evaluate(fixture_task(meta["task"]), path.read_text())
    assert res.correct is False
    if path.stem == "hardcoded_shape":  # its constant matches the CPU size only; at full size it is plainly wrong
        return
    assert _caught_as(res, meta["expect"]), (res.flags, res.error_kind, res.error_msg)


def test_every_flag_has_a_fixture():
    from davinci_kernel.evaluate.guards import FLAGS

    covered = {fixture_meta(p)["expect"] for p in ALL}
    # Detected only at run time on a GPU with a second process; no CPU-checkable fixture.
    gpu_runtime_only = {"reference_slowed", "unreproducible_speedup"}
    assert set(FLAGS) - covered - gpu_runtime_only == set()

