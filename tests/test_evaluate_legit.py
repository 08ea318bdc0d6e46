"""Legitimate kernels pass on CPU (interpreter) over odd shapes and dtypes; bad input is data."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, fixture_task

from davinci_kernel.records import Task

RELU = (FIXTURES / "legit" / "relu_triton.py").read_text()

TASK_TEMPLATE = '''"""ReLU on a {dtype} tensor.

op_type: elementwise
"""
import torch
import torch.nn as nn

rows = 1024
cols = 4096
CPU_SHAPES = {{"rows": {rows}, "cols": {cols}}}


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(rows, cols).to(torch.{dtype})]


def get_init_inputs():
    return []
'''


def relu_task(rows, cols, dtype):
    src = TASK_TEMPLATE.format(rows=rows, cols=cols, dtype=dtype)
    return Task(name=f"level1/relu_{rows}x{cols}_{dtype}", level=1, problem_id=0, source=src)


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 7), (17, 1025), (2, 4099)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_relu_odd_shapes_dtypes(cpu_evaluator, rows, cols, dtype):
    res = cpu_evaluator.evaluate(relu_task(rows, cols, dtype), RELU)
    assert res.correct, (res.error_kind, res.error_msg, res.flags)
    assert res.trials == 5 and res.trials_passed == 5
    assert res.custom_launches >= 1 and res.max_abs_diff == 0


def test_fused_matmul_passes(cpu_evaluator):
    res = cpu_evaluator.evaluate(fixture_task("matmul_relu"), (FIXTURES / "legit" / "matmul_relu_triton.py").read_text())
    assert res.correct, (res.error_kind, res.error_msg, res.flags)
    assert res.coverage is not None and res.coverage > 0.9
    assert not res.timing_available and res.speedup is None
    # the trials and the run at other sizes are timed apart (where an evaluation's time goes)
    assert res.phase_seconds["correctness"] > 0 and res.phase_seconds["perturbation"] > 0, res.phase_seconds


BAD = {
    "syntax_error": ("def broken(:\n", "static"),
    "no_modelnew": ("import torch\nclass Other(torch.nn.Module):\n    pass\n", "static"),
    "import_error": ("from torch import not_a_real_name_xyz\nclass ModelNew:\n    pass\n", "compile"),
    "shape_mismatch": (RELU.replace("return relu(x)", "return relu(x)[:1]"), "correctness"),
    "runtime_error": (RELU.replace("return relu(x)", "raise ValueError('boom')"), "correctness"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_bad_candidates_are_results(cpu_evaluator, kind):
    src, stage = BAD[kind]
    res = cpu_evaluator.evaluate(fixture_task("relu"), src)
    assert not res.correct
    assert res.error_kind == kind and res.stage == stage, (res.error_kind, res.stage, res.error_msg)
    assert res.error_msg and res.feedback


def test_hanging_kernel_times_out(tmp_path):
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import evaluate

    src = RELU.replace("return relu(x)", "while x.numel() > 0:\n            x = x + 0\n        return relu(x)")
    cfg = EvalConfig(device="cpu", run_timeout_s=4, compile_timeout_s=30, cache_dir=str(tmp_path))
    res = evaluate(fixture_task("relu"), src, cfg)
    assert not res.correct and res.error_kind == "timeout", (res.error_kind, res.error_msg)
    assert "did not finish" in res.error_msg


def test_shape_recheck_survives_an_earlier_candidate_that_stopped_early(cpu_evaluator):
    """The task's first candidate fails before the shape re-check, so the cached reference has
    no perturbed outputs yet; the next candidate must still be re-checked (and caught).
    On the session's evaluator, the ReLU problem with a line of its own added: a text no
    other test judges, so its reference entry is new here."""
    from dataclasses import replace

    relu = fixture_task("relu")
    task = replace(relu, source=relu.source + "\n# the shape re-check after an early stop\n")
    broken = "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        raise ValueError('no')\n"
    cheat = FIXTURES / "cheats" / "hardcoded_shape.py"
    first = cpu_evaluator.evaluate(task, broken)
    assert not first.correct and first.stage == "correctness"
    res = cpu_evaluator.evaluate(task, cheat.read_text())
    assert res.correct is False and "shape_hardcoding" in res.flags, (res.flags, res.warnings)


def test_reference_cache_maps_files_and_evicts_them(monkeypatch):
    """Cached reference outputs live as mapped files in the cache's folder; an evicted task's
    folder is removed and the task is recomputed correctly when it comes back."""
    import os

    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    relu = (FIXTURES / "legit" / "relu_triton.py").read_text()
    mm = (FIXTURES / "legit" / "matmul_relu_triton.py").read_text()
    with Evaluator(EvalConfig(device="cpu"), workers=1) as ev:
        ev.refs.max_entries = 1
        assert ev.evaluate(fixture_task("relu"), relu).correct
        (entry,) = ev.refs._entries.values()
        home = entry["home"]
        assert os.listdir(home) and entry["refs"][0][0].numel() == 5 * 300
        assert ev.evaluate(fixture_task("matmul_relu"), mm).correct
        assert not os.path.exists(home) and len(ev.refs._entries) == 1  # evicted with its files
        again = ev.evaluate(fixture_task("relu"), relu)
        assert again.correct, (again.error_kind, again.error_msg)


def test_a_kernel_specialised_to_tile_multiples_passes_and_odd_sizes_are_a_note(cpu_evaluator):
    """Tiles of 4 without bounds checks: correct at the task's sizes and at the shape
    re-check's (every power-of-two factor kept); the odd-size run goes to the feedback."""
    res = cpu_evaluator.evaluate(fixture_task("relu"), (FIXTURES / "legit" / "relu_tiles_of_4.py").read_text())
    assert res.correct, (res.error_kind, res.flags, res.error_msg)
    # at odd sizes the kernel reads past its tiles: what it finds there decides whether that
    # run is wrong; when it is, it is a note the policy is told, never a rejection
    odd = [w for w in res.warnings if w.startswith("odd_sizes")]
    assert not odd or "odd_sizes" in res.feedback, (res.warnings, res.feedback)
    assert "odd_sizes" not in res.flags
