"""Level-1 built-in problems: they load, carry a CPU small-shape variant, and their Triton
reference solutions match the PyTorch model under the interpreter (CPU shapes, 3 seeds, and
one perturbed shape).

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
from pathlib import Path

import pytest

from davinci_kernel.tasks import BUILTIN_DIR, REFERENCE_DIR, load_suite
from davinci_kernel.tasks.shapes import apply_overrides, cpu_overrides, perturbations

LEVEL = 1
SEEDS = (0, 1, 2)
PROBLEMS = sorted((BUILTIN_DIR / f"level{LEVEL}").glob("*.py"), key=lambda p: int(p.name.split("_")[0]))
IDS = [p.stem for p in PROBLEMS]


def _run_variant(problem_src: str, name: str, ref_module, overrides: dict, seed: int) -> str | None:
    """None when ModelNew matches Model on this variant and seed, else what went wrong."""
    import torch

    ns: dict = {"__name__": f"problem_{name}"}
    exec(compile(apply_overrides(problem_src, overrides), f"<{name}>", "exec"), ns)
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
    if not torch.isfinite(got).all():
        return "non-finite output"
    if not torch.allclose(got.float(), want.float(), atol=1e-2, rtol=1e-2):
        diff = (got.float() - want.float()).abs().max().item()
        return f"mismatch at {overrides} seed {seed}: max abs diff {diff:.3g}"
    return None


def check_all(level: int = LEVEL) -> dict:
    """Every problem of the level against its reference; {stem: {ok, error, seconds}}."""
    results = {}
    for path in sorted((BUILTIN_DIR / f"level{level}").glob("*.py")):
        start = time.perf_counter()
        ref_path = REFERENCE_DIR / f"level{level}" / path.name
        error = None
        try:
            if not ref_path.is_file():
                raise FileNotFoundError(f"no reference solution {ref_path.name}")
            spec = importlib.util.spec_from_file_location(f"reference_l{level}_{path.stem}", ref_path)
            ref_module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(ref_module)
            src = path.read_text()
            cpu = cpu_overrides(src)
            variants = [(cpu, s) for s in SEEDS]
            perturbed = perturbations(src, base=cpu)
            if perturbed:
                variants.append(({**cpu, **perturbed[0]}, SEEDS[0]))
            for overrides, seed in variants:
                error = _run_variant(src, path.stem, ref_module, overrides, seed)
                if error:
                    break
        except Exception as e:  # a broken reference is a failed check, reported per task
            error = f"{type(e).__name__}: {e}"
        results[path.stem] = {"ok": error is None, "error": error,
                              "seconds": round(time.perf_counter() - start, 2)}
    return results


@pytest.fixture(scope="module")
def interpreter_results():
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_level1_has_ten_problems():
    tasks = load_suite("builtin", level=LEVEL)
    assert len(tasks) >= 10
    assert all(t.level == LEVEL and t.suite == "builtin" for t in tasks)


@pytest.mark.parametrize("stem", IDS)
def test_problem_loads_with_cpu_shapes(stem):
    task = next(t for t in load_suite("builtin", level=LEVEL) if t.name == f"level{LEVEL}/{stem}")
    assert task.op_type, "docstring needs an 'op_type: <category>' line"
    cpu = cpu_overrides(task.source)
    assert cpu, "problem needs CPU_SHAPES"
    apply_overrides(task.source, cpu)  # every name in CPU_SHAPES is a module-level constant
    assert (REFERENCE_DIR / f"level{LEVEL}" / f"{stem}.py").is_file()


@pytest.mark.parametrize("stem", IDS)
def test_reference_matches_under_interpreter(stem, interpreter_results):
    result = interpreter_results[stem]
    assert result["ok"], result["error"]


if __name__ == "__main__":
    print(json.dumps(check_all()))
