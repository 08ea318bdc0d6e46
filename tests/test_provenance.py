"""Provenance: every run's run.json says what it ran on, and `dvk report` shows it.

A real `dvk bench` of the quick-start example on the CPU, a fake ``nvidia-smi`` on PATH for
the GPU fields (no GPU is needed), a resumed run on "another machine", and the model entry an
OpenAI-compatible server reports.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from conftest import run_dvk

from davinci_kernel import provenance
from davinci_kernel.rundir import RunDir

ROOT = Path(__file__).resolve().parent.parent
QS = ROOT / "examples" / "quickstart"


def _fake_smi(folder: Path, lines: str) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat <<'EOF'\n{lines}\nEOF\n")
    smi.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_collect_names_every_field(monkeypatch, tmp_path):
    env = _fake_smi(tmp_path / "bin", "NVIDIA H200, 570.86.15\nNVIDIA H200, 570.86.15")
    monkeypatch.setenv("PATH", env["PATH"])
    prov = provenance.collect(sandbox="auto: netns")
    assert set(provenance.KEYS) <= set(prov)
    assert prov["python"] == platform.python_version()
    assert prov["gpu"] == "2 x NVIDIA H200" and prov["gpu_count"] == 2 and prov["driver"] == "570.86.15"
    assert prov["sandbox"] == "auto: netns"
    import torch
    import triton

    assert prov["torch"] == torch.__version__ and prov["triton"] == triton.__version__
    assert prov["cuda"] == torch.version.cuda
    if (ROOT / ".git").exists():
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        assert prov["git_sha"].split("+")[0] == head


def test_collect_without_gpu_or_checkout(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi, no git
    prov = provenance.collect()
    assert prov["gpu"] is None and prov["gpu_count"] == 0
    assert provenance.git_sha(tmp_path) is None


def test_resumed_run_on_another_machine_keeps_the_first_provenance(monkeypatch, tmp_path):
    run = RunDir(tmp_path / "run")
    first = run.start({"kind": "run", "model": "m"}, sandbox="auto: a")
    assert first["provenance"]["sandbox"] == "auto: a" and "provenance_history" not in first
    (tmp_path / "run" / "results.jsonl").write_text('{"task": "t"}\n')  # a complete step: a resume, not a new run
    again = run.start({"kind": "run", "model": "m"}, sandbox="auto: a")
    assert "provenance_history" not in again  # same machine, same versions: nothing to keep
    moved = run.start({"kind": "run", "model": "m"}, sandbox="off (plain worker processes)")
    assert moved["provenance"]["sandbox"].startswith("off")
    assert [p["sandbox"] for p in moved["provenance_history"]] == ["auto: a"]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["provenance_history"]


def test_bench_records_provenance_and_report_shows_it(tmp_path):
    out = tmp_path / "run"
    p = run_dvk(["bench", "--suite", QS / "problems", "--candidates", QS / "kernels", "--device", "cpu",
                 "--workers", "1", "--out", out], cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    prov = json.loads((out / "run.json").read_text())["provenance"]
    assert set(provenance.KEYS) <= set(prov)
    assert prov["python"] == ".".join(map(str, sys.version_info[:3]))
    assert prov["sandbox"] and prov["davinci_kernel"]
    r = run_dvk(["report", out], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ran on: dvk " in r.stdout and f"torch {prov['torch']}" in r.stdout
    html = (out / "report.html").read_text()
    assert "<h3>Provenance</h3>" in html and "<dt>triton</dt>" in html
    j = run_dvk(["report", out, "--json"], cwd=tmp_path)
    assert json.loads(j.stdout)["provenance"] == prov


def test_report_of_a_run_without_provenance_says_so(tmp_path):
    out = tmp_path / "old"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"kind": "bench", "suite": "builtin"}))
    (out / "results.jsonl").write_text(json.dumps({"task": "level1/1_X", "level": 1, "compiled": True,
                                                   "correct": True, "stage": "done"}) + "\n")
    r = run_dvk(["report", out], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ran on: not recorded" in r.stdout


def test_served_model_is_the_servers_own_entry():
    from openai.types import Model

    from davinci_kernel.llm.openai_backend import _served

    models = [Model(id="other", object="model", created=1, owned_by="vllm"),
              Model(id="Qwen/Qwen3-8B", object="model", created=2, owned_by="vllm", root="/models/qwen3-8b",
                    max_model_len=32768)]
    assert _served(models, "Qwen/Qwen3-8B") == {"id": "Qwen/Qwen3-8B", "root": "/models/qwen3-8b",
                                                "owned_by": "vllm", "max_model_len": 32768, "created": 2}


def test_comparison_names_what_each_run_ran_on(tmp_path):
    from davinci_kernel.report.compare import run_summary
    from davinci_kernel.report.rundata import RunData

    meta = {"kind": "run", "model": "openai:http://h/v1#m", "server_model": {"id": "m", "root": "/models/m"},
            "provenance": {**provenance.collect(), "gpu": "NVIDIA H200", "torch": "2.11.0"}}
    line = run_summary(RunData(path=tmp_path, meta=meta))
    assert "served /models/m" in line and "torch 2.11.0" in line and "GPU NVIDIA H200" in line
