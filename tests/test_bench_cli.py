"""`dvk tasks list` and `dvk bench` end to end on a small KernelBench-format suite (CPU),
on the local pool and on a local Ray cluster."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURES


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    probs, cands = root / "problems" / "level1", root / "cands" / "level1"
    probs.mkdir(parents=True)
    cands.mkdir(parents=True)
    shutil.copy(FIXTURES / "tasks" / "relu.py", probs / "1_ReLU.py")
    shutil.copy(FIXTURES / "tasks" / "matmul_relu.py", probs / "2_MatmulReLU.py")
    shutil.copy(FIXTURES / "legit" / "relu_triton.py", cands / "1_ReLU.py")  # 2 is missing: unsolved
    return root


def dvk(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "davinci_kernel.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def test_tasks_list_json(suite):
    p = dvk("tasks", "list", "--suite", f"kernelbench:{suite / 'problems'}", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["count"] == 2 and doc["levels"] == {"1": 2}
    assert [t["name"] for t in doc["tasks"]] == ["level1/1_ReLU", "level1/2_MatmulReLU"]


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_bench_writes_results_and_fastp(suite, tmp_path, backend):
    if backend == "ray":
        pytest.importorskip("ray")
    out = tmp_path / "run"
    p = dvk("bench", "--suite", f"kernelbench:{suite / 'problems'}", "--candidates", str(suite / "cands"),
            "--device", "cpu", "--workers", "1", "--backend", backend, "--out", str(out), "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    summary = json.loads(p.stdout)
    assert summary["fast_p"]["1"]["n"] == 2 and summary["fast_p"]["1"]["fast_0"] == 0.5
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    by_task = {r["task"]: r for r in lines}
    assert by_task["level1/1_ReLU"]["correct"] is True
    assert by_task["level1/2_MatmulReLU"]["error_kind"] == "missing"


@pytest.mark.parametrize("args", [["--suite", "kernelbench:{tmp}/nope"], ["--workers", "0"], ["--workers", "-2"]])
def test_bench_bad_input_exits_2(tmp_path, args):
    p = dvk("bench", *[a.format(tmp=tmp_path) for a in args])
    assert p.returncode == 2 and p.stderr.strip().startswith("error:") and "Traceback" not in p.stderr
