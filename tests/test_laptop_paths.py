"""The laptop paths of the guides, run exactly as the docs print them (issue 43): the tiny end
to end example (SFT of a tiny model from a config, RL from it, --resume, the report, a skill
file added), the optimize guide's dry run with no model, and its tiny model on vLLM's CPU build
(only where DVK_VLLM_PYTHON names the vLLM venv's python, as the other vLLM tests)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tiny_end_to_end"


def block(path: Path, name: str) -> str:
    """The bash block between ``--8<-- [start:NAME]`` and ``[end:NAME]`` of a markdown file."""
    text = path.read_text(encoding="utf-8")
    m = re.search(rf"<!-- --8<-- \[start:{name}\] -->\n```bash\n(.*?)```\n<!-- --8<-- \[end:{name}\] -->", text, re.S)
    assert m, f"{path} has no bash block named {name}"
    return m.group(1)


def lines(path: Path, name: str) -> list[str]:
    """Its command lines, comments dropped (two spaces then #), as run.sh takes them."""
    return [re.sub(r" {2,}#.*$", "", x).strip() for x in block(path, name).splitlines() if x.strip()]


def _copy(tmp: Path) -> Path:
    shutil.copytree(ROOT / "examples", tmp / "examples")
    shutil.copytree(ROOT / "configs", tmp / "configs")
    return tmp


def _run(line: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """A docs line in bash, `dvk` being this checkout's (``python -m davinci_kernel.cli``)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    bindir = cwd / ".bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "dvk").write_text(f'#!/bin/sh\nexec {sys.executable} -m davinci_kernel.cli "$@"\n')
    (bindir / "dvk").chmod(0o755)
    # a wrapper, not a symlink: a venv's python reached through a link elsewhere is not that venv's
    (bindir / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (bindir / "python").chmod(0o755)
    env["PATH"] = f"{bindir}:{env['PATH']}"
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_run_sh_runs_the_readme_lines():
    """run.sh runs the README's `tiny` lines as written (nothing of its own to drift)."""
    got = subprocess.run(["bash", str(EXAMPLE / "run.sh"), "--print"], capture_output=True, text=True,
                         timeout=30).stdout.splitlines()
    assert got == lines(EXAMPLE / "README.md", "tiny") and len(got) == 5


@pytest.mark.slow
def test_the_tiny_end_to_end_example_runs_as_written(tmp_path):
    cmds = lines(EXAMPLE / "README.md", "tiny")
    assert [c.split()[:3] for c in cmds] == [["dvk", "train", "sft"], ["dvk", "train", "rl"], ["dvk", "train", "rl"],
                                             ["dvk", "report", "runs/tiny/rl"], ["dvk", "skills", "add"]]
    cwd = _copy(tmp_path)
    outs = []
    for line in cmds:
        p = _run(line, cwd)
        assert p.returncode == 0, (line, p.stderr[-3000:])
        outs.append(p)
    runs = cwd / "runs" / "tiny"
    assert (runs / "sft" / "model" / "config.json").is_file()
    assert (runs / "rl" / "checkpoints" / "step-3" / "COMPLETE").is_file()
    assert "resumed from" in outs[2].stderr and "step 3" in outs[2].stderr
    assert [json.loads(x)["step"] for x in (runs / "rl" / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert (runs / "rl" / "report.html").is_file() and "a training run: 3 steps" in outs[3].stdout
    assert "added fused_bias_relu" in outs[4].stdout


def test_the_optimize_dry_run_with_no_model_runs_as_written(tmp_path):
    (line,) = lines(ROOT / "docs" / "guides" / "optimize.md", "dry-run")
    cwd = _copy(tmp_path)
    p = _run(line, cwd)
    assert p.returncode == 0, p.stderr[-3000:]
    best = json.loads((cwd / "runs" / "dry" / "best.json").read_text())
    assert best["correct"] is True and "class ModelNew" in (cwd / "runs" / "dry" / "best.py").read_text()


VLLM_PY = os.environ.get("DVK_VLLM_PYTHON", "")


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(not VLLM_PY, reason="DVK_VLLM_PYTHON is unset (the vLLM server venv)")
def test_the_optimize_guide_on_a_cpu_vllm_runs_as_written(tmp_path):
    """The guide's block with its venv line (`# once`) left out: the venv is DVK_VLLM_PYTHON's."""
    text = block(ROOT / "docs" / "guides" / "optimize.md", "cpu-vllm")
    once, rest = text.split("\n", 1)
    assert once.endswith("# once") and ".venv-vllm" in once
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 8000)) == 0:
            pytest.skip("port 8000 is taken")
    cwd = _copy(tmp_path)
    (cwd / ".venv-vllm").symlink_to(Path(VLLM_PY).parent.parent)
    p = _run("set -e\n" + rest, cwd, timeout=900)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-4000:])
    assert (cwd / "runs" / "opt-tiny" / "groups.jsonl").is_file()
    assert "model calls failed" not in p.stderr
