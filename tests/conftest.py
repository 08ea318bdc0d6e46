"""Shared fixtures: a CPU evaluator (Triton interpreter) reused across tests, task loaders."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_meta(path: Path) -> dict:
    """`task:` and `expect:` lines from a fixture's docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    meta = {}
    for line in doc.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            if k.strip() in ("task", "expect"):
                meta[k.strip()] = v.strip()
    return meta


def fixture_task(name: str):
    from davinci_kernel.tasks import load_task_file

    return load_task_file(FIXTURES / "tasks" / f"{name}.py")


@pytest.fixture(scope="session")
def cpu_evaluator(tmp_path_factory):
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    cfg = EvalConfig(device="cpu", run_timeout_s=60, compile_timeout_s=60,
                     cache_dir=str(tmp_path_factory.mktemp("dvk-cache")))
    with Evaluator(cfg, workers=2) as ev:
        yield ev


@pytest.fixture(scope="session")
def gpu_evaluator(tmp_path_factory):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    cfg = EvalConfig(device="cuda", cache_dir=str(tmp_path_factory.mktemp("dvk-cache")), baseline_compile=False)
    with Evaluator(cfg, workers=1) as ev:
        yield ev


@pytest.fixture(scope="session")
def _test_home(tmp_path_factory):
    return tmp_path_factory.mktemp("home")


@pytest.fixture(autouse=True)
def _temporary_home(_test_home, monkeypatch):
    """Tests (and the `dvk` processes they start) get a temporary HOME and XDG cache, so the
    default skill library and caches are never written in the real home."""
    monkeypatch.setenv("HOME", str(_test_home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(_test_home / ".cache"))
