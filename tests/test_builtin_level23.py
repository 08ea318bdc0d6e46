"""Level-2 (fusion) and level-3 (small architecture) built-in problems: they load, carry a
CPU small-shape variant, stay within the size limits at full size, and their Triton
reference solutions match the PyTorch model under the interpreter (CPU shapes, 3 seeds,
and one perturbed shape).

The interpreter check runs once for the whole file in a child process started with
TRITON_INTERPRET=1 (this process may already have imported triton for a real device).
"""
import os

if __name__ == "__main__":
    os.environ["TRITON_INTERPRET"] = "1"

import importlib.util
import json
import subprocess
import sys
import time

import pytest

from davinci_kernel.tasks import BUILTIN_DIR, REFERENCE_DIR, load_suite
from davinci_kernel.tasks.shapes import apply_overrides, cpu_overrides, perturbations

LEVELS = {2: 10, 3: 4}  # level -> number of built-in problems it must hold
SEEDS = (0, 1, 2)
MAX_TENSOR_BYTES = 2 * 1024**3


def _problems():
    out = []
    for level in LEVELS:
        paths = sorted((BUILTIN_DIR / f"level{level}").glob("*.py"), key=lambda p: int(p.name.split("_")[0]))
        out += [f"level{level}/{p.stem}" for p in paths]
    return out


NAMES = _problems()


def _run_variant(source: str, name: str, ref_module, overrides: dict, seed: int):
    """None when ModelNew matches Model on this size variant and seed, else why not."""
    import torch

    ns: dict = {"__name__": "problem_" + name.replace("/", "_")}
    exec(compile(apply_overrides(source, overrides), f"<{name}>", "exec"), ns)
    torch.manual_seed(seed)
    inputs = ns["get_inputs"]()
    init = ns["get_init_inputs"]()
    torch.manual_seed(seed + 1000)
    model = ns["Model"](*init)
    torch.manual_seed(seed + 1000)
    model_new = ref_module.ModelNew(*init)
    with torch.no_grad():
        want = model(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs])
        got = model_new(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs])
    if type(got) is not torch.Tensor:
        return f"output type {type(got).__name__}"
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"output {tuple(got.shape)} {got.dtype}, expected {tuple(want.shape)} {want.dtype}"
    if not torch.isfinite(want).all() or not torch.isfinite(got).all():
        return "non-finite output"
    if not torch.allclose(got, want, atol=1e-2, rtol=1e-2):
        diff = (got - want).abs().max().item()
        return f"mismatch at {overrides} seed {seed}: max abs diff {diff:.3g}"
    return None


def _load_reference(name: str):
    path = REFERENCE_DIR / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no reference solution {path.name}")
    module_name = "reference_" + name.replace("/", "_")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def check_all() -> dict:
    """Every level-2/3 problem against its reference: {name: {ok, error, seconds}}."""
    results = {}
    for name in NAMES:
        start = time.perf_counter()
        error = None
        try:
            ref_module = _load_reference(name)
            src = (BUILTIN_DIR / f"{name}.py").read_text()
            cpu = cpu_overrides(src)
            variants = [(cpu, s) for s in SEEDS]
            perturbed = perturbations(src, base=cpu)
            if perturbed:
                variants.append(({**cpu, **perturbed[0]}, SEEDS[0] + 7))
            for overrides, seed in variants:
                error = _run_variant(src, name, ref_module, overrides, seed)
                if error:
                    break
        except Exception as e:  # a broken reference is a failed check, reported per task
            error = f"{type(e).__name__}: {e}"
        results[name] = {"ok": error is None, "error": error,
                         "seconds": round(time.perf_counter() - start, 2)}
    return results


@pytest.fixture(scope="module")
def interpreter_results():
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _task(name: str):
    level = int(name.split("/")[0].removeprefix("level"))
    return next(t for t in load_suite("builtin", level=level) if t.name == name)


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_level_has_its_problems(level):
    tasks = load_suite("builtin", level=level)
    assert len(tasks) >= LEVELS[level]
    assert all(t.level == level and t.suite == "builtin" for t in tasks)
    assert [t.problem_id for t in tasks] == list(range(1, len(tasks) + 1))


@pytest.mark.parametrize("name", NAMES)
def test_problem_loads_with_cpu_shapes(name):
    task = _task(name)
    kind = "fusion/" if task.level == 2 else "architecture/"
    assert task.op_type.startswith(kind), "docstring needs an 'op_type: <category>' line"
    cpu = cpu_overrides(task.source)
    assert cpu, "problem needs CPU_SHAPES"
    apply_overrides(task.source, cpu)  # every name in CPU_SHAPES is a module-level constant
    assert perturbations(task.source, base=cpu), "problem needs sizes the shape re-check can change"
    assert (REFERENCE_DIR / f"{name}.py").is_file()


@pytest.mark.parametrize("name", NAMES)
def test_full_size_tensors_fit(name):
    """Full-size inputs and parameters, built on the meta device (no memory used)."""
    import torch

    ns: dict = {"__name__": "problem_meta"}
    exec(compile(_task(name).source, name, "exec"), ns)
    with torch.device("meta"):
        inputs = ns["get_inputs"]()
        model = ns["Model"](*ns["get_init_inputs"]())
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)] + list(model.parameters())
    assert all(t.dtype == torch.float32 for t in tensors)
    assert max(t.numel() * t.element_size() for t in tensors) <= MAX_TENSOR_BYTES


@pytest.mark.parametrize("name", NAMES)
def test_reference_matches_under_interpreter(name, interpreter_results):
    result = interpreter_results[name]
    assert result["ok"], result["error"]


if __name__ == "__main__":
    print(json.dumps(check_all()))
