"""Every reward-hacking fixture must come back correct=false with its named flag."""

from __future__ import annotations

import pytest

from conftest import FIXTURES, fixture_meta, fixture_task

CHEATS = sorted((FIXTURES / "cheats").glob("*.py"))
GPU_ONLY = {"timing_only_cheat"}  # only timing exposes it


@pytest.mark.parametrize("path", [p for p in CHEATS if p.stem not in GPU_ONLY], ids=lambda p: p.stem)
def test_cheat_is_caught_on_cpu(cpu_evaluator, path):
    meta = fixture_meta(path)
    res = cpu_evaluator.evaluate(fixture_task(meta["task"]), path.read_text())
    assert res.correct is False
    assert meta["expect"] in res.flags, (res.flags, res.error_kind, res.error_msg)
    assert meta["expect"] in res.feedback


@pytest.mark.gpu
@pytest.mark.parametrize("path", CHEATS, ids=lambda p: p.stem)
def test_cheat_is_caught_on_gpu(gpu_evaluator, path):
    meta = fixture_meta(path)
    res = gpu_evaluator.evaluate(fixture_task(meta["task"]), path.read_text())
    assert res.correct is False
    if path.stem == "hardcoded_shape":  # its constant matches the CPU size only; at full size it is plainly wrong
        return
    assert meta["expect"] in res.flags, (res.flags, res.error_kind, res.error_msg)


def test_every_flag_has_a_fixture():
    from davinci_kernel.evaluate.guards import FLAGS

    covered = {fixture_meta(p)["expect"] for p in CHEATS}
    # Detected only at run time on a GPU with a second process; no CPU-checkable fixture.
    gpu_runtime_only = {"reference_slowed", "unreproducible_speedup"}
    assert set(FLAGS) - covered - gpu_runtime_only == set()


def test_shape_recheck_survives_an_earlier_candidate_that_stopped_early():
    """The task's first candidate fails before the shape re-check, so the cached reference has
    no perturbed outputs yet; the next candidate must still be re-checked (and caught)."""
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    broken = "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        raise ValueError('no')\n"
    cheat = FIXTURES / "cheats" / "hardcoded_shape.py"
    with Evaluator(EvalConfig(device="cpu"), workers=1) as ev:
        first = ev.evaluate(fixture_task("relu"), broken)
        assert not first.correct and first.stage == "correctness"
        res = ev.evaluate(fixture_task("relu"), cheat.read_text())
    assert res.correct is False and "shape_hardcoding" in res.flags, (res.flags, res.warnings)
