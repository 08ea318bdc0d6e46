"""Shared fixtures: a CPU evaluator (Triton interpreter) reused across tests, task loaders,
and the scripted backbone the end-to-end command tests run `dvk` with."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
RELU = (FIXTURES / "tasks" / "relu.py").read_text()  # the ReLU problem (KernelBench format)

_RELU_KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, {store}, mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), {block}),)](x, y, x.numel(), BLOCK={block})
        return y
'''

_SCRIPT_HEAD = '''import os
import re


def log(word):
    """One line per model call in $DVK_SCRIPT_LOG, so that a test can count the calls."""
    with open(os.environ["DVK_SCRIPT_LOG"], "a") as fh:
        fh.write(word + "\\n")


'''


def relu_kernel(store: str = "tl.maximum(x, 0.0)", block: int = 1024) -> str:
    """A Triton ``ModelNew`` for the ReLU problem that stores ``store`` (a correct ReLU by default)."""
    return _RELU_KERNEL.format(store=store, block=block)


def write_script(path: Path, respond: str, **constants) -> Path:
    """A ``script:FILE.py`` backbone: ``constants`` as globals, ``log(word)`` and the
    ``respond(request)`` source given."""
    values = "".join(f"{k} = {v!r}\n" for k, v in constants.items())
    path.write_text(_SCRIPT_HEAD + values + "\n\n" + respond)
    return path


def write_suite(root: Path, problems: dict[str, str]) -> Path:
    """``root/suite/level1/<name>.py`` for each problem; the suite folder (``kernelbench:DIR``)."""
    level = root / "suite" / "level1"
    level.mkdir(parents=True, exist_ok=True)
    for name, source in problems.items():
        (level / f"{name}.py").write_text(source)
    return root / "suite"


def script_env(log: Path | str) -> dict:
    return dict(os.environ, DVK_SCRIPT_LOG=str(log), OMP_NUM_THREADS="1")


def run_dvk(args, env=None, timeout: float = 300, cwd=None) -> subprocess.CompletedProcess:
    """``python -m davinci_kernel.cli ARGS`` in a child process."""
    return subprocess.run([sys.executable, "-m", "davinci_kernel.cli", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=cwd)


def sigint_default() -> None:
    """A ``preexec_fn`` for a child a test will Ctrl-C: SIGINT's default action in the child
    even when the suite was started with SIGINT ignored (a background job of a
    non-interactive shell), which the child would inherit and Python would then honour."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def fixture_meta(path: Path) -> dict:
    """`task:`, `expect:` and `cpu_also:` (another acceptable outcome on the CPU) lines from a
    fixture's docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    meta = {}
    for line in doc.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            if k.strip() in ("task", "expect", "cpu_also"):
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


@pytest.fixture
def one_torch_thread():
    """torch on one CPU thread for the test (tiny models: threads only add noise and wait)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def grad_recorder(params):
    """An optimizer that keeps a copy of the gradient it is asked to apply and changes nothing."""
    import torch

    class GradRecorder(torch.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {})
            self.grads: list[torch.Tensor] = []

        def step(self, closure=None):
            self.grads = [p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                          for g in self.param_groups for p in g["params"]]

    return GradRecorder(params)
