"""The built-in suite: every problem loads, carries a CPU small-shape variant, and its Triton
reference solution passes the real evaluator on CPU (interpreter, CPU shapes, 5 trials,
the perturbed-size re-check and every guard)."""

from __future__ import annotations

import pytest

from davinci_kernel.tasks import REFERENCE_DIR, candidate_path, load_suite
from davinci_kernel.tasks.shapes import apply_overrides, cpu_overrides, perturbations

LEVELS = {1: 10, 2: 10, 3: 4}  # level -> number of built-in problems it must hold
MAX_TENSOR_BYTES = 2 * 1024**3
TASKS = {t.name: t for t in load_suite("builtin")}
NAMES = sorted(TASKS, key=lambda n: (TASKS[n].level, TASKS[n].problem_id))
FUSED = [n for n in NAMES if TASKS[n].level >= 2]


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_level_has_its_problems(level):
    tasks = load_suite("builtin", level=level)
    assert len(tasks) >= LEVELS[level]
    assert all(t.level == level and t.suite == "builtin" for t in tasks)
    if level >= 2:
        assert [t.problem_id for t in tasks] == list(range(1, len(tasks) + 1))


@pytest.mark.parametrize("name", NAMES)
def test_problem_loads_with_cpu_shapes(name):
    task = TASKS[name]
    assert task.op_type, "docstring needs an 'op_type: <category>' line"
    if task.level >= 2:
        kind = "fusion/" if task.level == 2 else "architecture/"
        assert task.op_type.startswith(kind)
    cpu = cpu_overrides(task.source)
    assert cpu, "problem needs CPU_SHAPES"
    apply_overrides(task.source, cpu)  # every name in CPU_SHAPES is a module-level constant
    if task.level >= 2:
        assert perturbations(task.source, base=cpu), "problem needs sizes the shape re-check can change"
    assert candidate_path(REFERENCE_DIR, task).is_file()


@pytest.mark.parametrize("name", FUSED)
def test_full_size_tensors_fit(name):
    """Full-size inputs and parameters, built on the meta device (no memory used)."""
    import torch

    ns: dict = {"__name__": "problem_meta"}
    exec(compile(TASKS[name].source, name, "exec"), ns)
    with torch.device("meta"):
        inputs = ns["get_inputs"]()
        model = ns["Model"](*ns["get_init_inputs"]())
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)] + list(model.parameters())
    assert all(t.dtype == torch.float32 for t in tensors)
    assert max(t.numel() * t.element_size() for t in tensors) <= MAX_TENSOR_BYTES


@pytest.fixture(scope="module")
def reference_results(cpu_evaluator):
    items = [(TASKS[n], candidate_path(REFERENCE_DIR, TASKS[n]).read_text()) for n in NAMES]
    return dict(zip(NAMES, cpu_evaluator.evaluate_many(items)))


@pytest.mark.parametrize("name", NAMES)
def test_reference_passes_the_evaluator(name, reference_results):
    res = reference_results[name]
    assert res.correct, (res.error_kind, res.error_msg, res.flags)
