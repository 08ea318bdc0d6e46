"""Helpers of tests/test_evaluate_sandbox.py: a throwaway harness process, honest and zeros
candidates, and fixture metadata.

Several sandbox fixtures attack the *harness process* itself (they write its memory through
/proc, SIGKILL its workers, overwrite files it owns). They must never run inside the pytest
process (on code without a sandbox they would corrupt it), so every evaluation here runs in
a separate harness process started by ``run_harness``: ``python tests/sandbox_helpers.py
SPEC.json`` builds an ``Evaluator``, evaluates the items and prints one JSON line with the
results. Its HOME and working directory are temporary folders the test made, so an attack
that looks for the harness's state under HOME or the working directory finds only test files.

The static check is bypassed in these harness processes (``"static": "off"``, the default
here): the fixtures test the OS sandbox, which must hold whatever Python a candidate gets
past the static policy (ctypes included). The harness prints ``DVK_SANDBOX_ROOT <folder>``
once its evaluator exists, and each result carries the harness's peak memory (``maxrss_kb``).

Run directly: ``python tests/sandbox_helpers.py SPEC.json`` where SPEC holds
``{"items": [[task_file, candidate_file], ...], "mode": "seq" | "many", "workers": 1,
"cache_dir": DIR, "device": "cpu", "static": "off" | "on"}``.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
CHEATS = FIXTURES / "cheats"
TASKS = FIXTURES / "tasks"
RELU_TASK = TASKS / "relu.py"
HONEST_RELU = FIXTURES / "legit" / "relu_triton.py"
MARK = "DVK_SANDBOX_RESULT "
ROOT_MARK = "DVK_SANDBOX_ROOT "

# A Triton kernel that writes zeros: launches a custom kernel, computes nothing.
ZEROS_SOURCE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fill_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        fill_kernel[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
        return y
'''


def fixture_meta(path: Path) -> dict:
    """``task:``, ``expect:`` and ``also:`` (other acceptable flags, comma-separated) from a
    fixture's docstring."""
    doc = ast.get_docstring(ast.parse(Path(path).read_text())) or ""
    meta: dict = {}
    for line in doc.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            if k.strip() in ("task", "expect", "also"):
                meta[k.strip()] = v.strip()
    meta["accept"] = {meta.get("expect", "")} | {a.strip() for a in meta.get("also", "").split(",") if a.strip()}
    return meta


def caught(res: dict, accept: set) -> bool:
    """Rejected, with one of the accepted flags or error kinds."""
    return res["correct"] is False and bool(accept & (set(res["flags"]) | {res["error_kind"]}))


def write_zeros(folder: Path) -> Path:
    p = Path(folder) / "zeros_triton.py"
    p.write_text(ZEROS_SOURCE)
    return p


def run_harness(items: list, tmp: Path, mode: str = "seq", workers: int = 1, device: str = "cpu",
                pythonpath: Optional[str] = None, env: Optional[dict] = None, timeout: float = 600,
                cache_dir: Optional[Path] = None, cwd: Optional[Path] = None, extra: Optional[dict] = None) -> dict:
    """Evaluate ``items`` ([(task_file, candidate_file)]) in a fresh harness process.

    Returns ``{"results": [result dicts], "rc": ..., "stderr": ...}``; ``results`` is None when
    the harness process died or printed nothing (e.g. its memory was corrupted)."""
    tmp = Path(tmp)
    cwd = Path(cwd) if cwd else tmp / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    spec = harness_spec(items, tmp, mode, workers, device, cache_dir, extra)
    e = harness_env(tmp, pythonpath, env)
    p = subprocess.run(harness_argv(spec, tmp), cwd=str(cwd), env=e, capture_output=True, text=True,
                       timeout=timeout)
    results = None
    for line in p.stdout.splitlines():
        if line.startswith(MARK):
            results = json.loads(line[len(MARK):])
    return {"results": results, "rc": p.returncode, "stderr": p.stderr[-4000:], "stdout": p.stdout[-4000:]}


def harness_spec(items: list, tmp: Path, mode: str = "seq", workers: int = 1, device: str = "cpu",
                 cache_dir: Optional[Path] = None, extra: Optional[dict] = None) -> dict:
    cache_dir = Path(cache_dir) if cache_dir else Path(tmp) / "cache"
    return {"items": [[str(t), str(c)] for t, c in items], "mode": mode, "workers": workers,
            "cache_dir": str(cache_dir), "device": device, **(extra or {})}


def harness_env(tmp: Path, pythonpath: Optional[str] = None, env: Optional[dict] = None) -> dict:
    """A harness process's environment: HOME and caches under ``tmp``."""
    home = Path(tmp) / "home"
    home.mkdir(parents=True, exist_ok=True)
    e = dict(os.environ)
    e["HOME"] = str(home)
    e["XDG_CACHE_HOME"] = str(home / ".cache")
    e["TRITON_CACHE_DIR"] = str(home / ".triton")
    e["PYTHONPATH"] = pythonpath if pythonpath else str(HERE.parent)
    e.update(env or {})
    return e


def harness_argv(spec: dict, tmp: Path) -> list[str]:
    """The command line of a throwaway harness process for ``spec`` (written under ``tmp``)."""
    spec_path = Path(tmp) / f"spec-{os.getpid()}-{len(list(Path(tmp).glob('spec-*')))}.json"
    spec_path.write_text(json.dumps(spec))
    return [sys.executable, str(HERE / "sandbox_helpers.py"), str(spec_path)]


def _static_off() -> None:
    """Every source is judged as if the static check found nothing."""
    from davinci_kernel.evaluate.harness.codepolicy import static

    clean = static.check("import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
                         "        return x\n")
    static.check = lambda source, policy=True: clean


def _harness_main(spec_path: str) -> None:
    import resource

    spec = json.loads(Path(spec_path).read_text())
    if spec.get("static", "off") == "off":
        _static_off()
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator
    from davinci_kernel.tasks import load_task_file

    kw = dict(device=spec["device"], cache_dir=spec["cache_dir"])
    kw["code_policy"] = spec.get("code_policy", "off")  # these attacks test the runtime defences (in depth)
    kw["prefork"] = spec.get("prefork", True)
    if spec["device"] == "cpu":
        kw.update(run_timeout_s=90, compile_timeout_s=90)
    else:
        kw.update(baseline_compile=False)
    cfg = EvalConfig(**kw)
    items = [(load_task_file(Path(t)), Path(c).read_text()) for t, c in spec["items"]]
    out, rss = [], []
    with Evaluator(cfg, workers=spec["workers"]) as ev:
        print(ROOT_MARK + json.dumps({"root": getattr(ev, "tmp_root", None), "pid": os.getpid()}), flush=True)
        if spec["mode"].startswith("many"):  # "many": all at once; "many:K": K at a time, group after group
            k = int(spec["mode"].split(":")[1]) if ":" in spec["mode"] else max(1, len(items))
            results = [r for i in range(0, len(items), k) for r in ev.evaluate_many(items[i:i + k])]
        else:  # one at a time, the harness's peak memory taken after each
            results, rss = [], []
            for t, s in items:
                results.append(ev.evaluate(t, s))
                rss.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        for i, r in enumerate(results):
            out.append({"correct": r.correct, "flags": list(r.flags), "error_kind": r.error_kind,
                        "error_msg": (r.error_msg or "")[:600], "stage": r.stage, "speedup": r.speedup,
                        "trials_passed": r.trials_passed, "trials": r.trials,
                        "sandbox": getattr(r, "sandbox", None),
                        "maxrss_kb": rss[i] if spec["mode"] == "seq" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                        "harness_pid": os.getpid()})
        print(MARK + json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    _harness_main(sys.argv[1])
