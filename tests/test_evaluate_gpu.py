"""GPU-only evaluator tests (run with `pytest -m gpu` on a CUDA machine)."""

from __future__ import annotations

import pytest

from conftest import FIXTURES, fixture_task

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name,task", [("relu_triton", "relu"), ("matmul_relu_triton", "matmul_relu"),
                                       ("relu_cuda", "relu")])
def test_legit_kernels_time_on_gpu(gpu_evaluator, name, task):
    res = gpu_evaluator.evaluate(fixture_task(task), (FIXTURES / "legit" / f"{name}.py").read_text())
    assert res.correct, (res.error_kind, res.error_msg, res.flags)
    assert res.timing_available and res.speedup and res.speedup > 0
    assert res.coverage is not None and res.coverage > 0.5
    assert res.kernels and any(k.custom for k in res.kernels)


def test_illegal_memory_access_replaces_worker(gpu_evaluator):
    before = gpu_evaluator.pool.replaced
    res = gpu_evaluator.evaluate(fixture_task("relu"), (FIXTURES / "legit" / "illegal_access_cuda.py").read_text())
    assert not res.correct and res.error_kind == "cuda_error", (res.error_kind, res.error_msg)
    assert gpu_evaluator.pool.replaced == before + 1
    again = gpu_evaluator.evaluate(fixture_task("relu"), (FIXTURES / "legit" / "relu_triton.py").read_text())
    assert again.correct, again.error_msg
