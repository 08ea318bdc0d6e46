"""The seed library: at least 20 well-formed skills whose examples run and check themselves."""

import ast
import json
import os
import subprocess
import sys

import pytest

from davinci_kernel.skills.admit import content_filter
from davinci_kernel.skills.markdown import example_blocks
from davinci_kernel.skills.seed_build import SEED_DIR, SEED_JSONL, build, load_sources


def test_at_least_twenty_wellformed_skills():
    src = load_sources()
    assert len(src) >= 20
    names = [s.name for s, _, _ in src]
    assert len(set(names)) == len(names)
    for skill, extra, path in src:
        assert content_filter(skill) is None, (path, content_filter(skill))
        blocks = example_blocks(skill.content)
        assert blocks, path
        for _, code in blocks:
            ast.parse(code)
            assert "triton.jit" in code or "__global__" in code, path
        assert {"launcher", "reference", "inputs"} <= set(extra.get("bench", {})), path


def test_bundled_jsonl_matches_sources(tmp_path):
    built = build(tmp_path / "seed.jsonl")
    shipped = [json.loads(l) for l in SEED_JSONL.read_text().splitlines() if l.strip()]
    assert [s["name"] for s in shipped] == [s.name for s in built]
    for row, skill in zip(shipped, built):
        assert row["content"] == skill.content and row["tags"] == skill.tags


def test_every_triton_example_runs_in_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-m", "davinci_kernel.skills.run_examples", str(SEED_DIR), "--json"],
                       capture_output=True, text=True, env=env, timeout=600)
    report = json.loads(r.stdout.strip().splitlines()[-1])
    results = {x["name"]: x for x in report["results"]}
    failed = {n: x["error"] for n, x in results.items() if x["status"] == "failed"}
    assert not failed, failed
    triton_ok = [n for n, x in results.items() if x["status"] == "ok"]
    skipped = [n for n, x in results.items() if x["status"] == "skipped"]
    assert len(triton_ok) >= 20
    assert all(n.startswith("cuda_") for n in skipped)


@pytest.mark.gpu
def test_cuda_examples_run_on_gpu():
    r = subprocess.run([sys.executable, "-m", "davinci_kernel.skills.run_examples", str(SEED_DIR), "--json"],
                       capture_output=True, text=True, timeout=900)
    report = json.loads(r.stdout.strip().splitlines()[-1])
    bad = {x["name"]: (x["status"], x["error"]) for x in report["results"] if x["status"] != "ok"}
    assert not bad, bad
    assert len(report["results"]) >= 20
