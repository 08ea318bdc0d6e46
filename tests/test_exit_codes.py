"""Exit codes as `dvk --help` states them (0 done, 2 bad usage or input, 1 our failure, 130
interrupted), one test per case that used to contradict it: real `dvk` processes, real files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURES
from conftest import run_dvk as dvk

BROKEN = (FIXTURES / "tasks" / "relu.py").read_text().replace(
    "def get_inputs():", 'def get_inputs():\n    raise RuntimeError("boom in get_inputs")', 1)
NOT_UTF8 = b"\xff\xfeimport torch\n"


def test_a_non_utf8_candidate_is_bad_input_in_eval(tmp_path):
    cand = tmp_path / "cand.py"
    cand.write_bytes(NOT_UTF8)
    p = dvk(["eval", FIXTURES / "tasks" / "relu.py", cand, "--device", "cpu"], timeout=120)
    assert p.returncode == 2, (p.returncode, p.stdout[-500:], p.stderr[-500:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "not UTF-8" in lines[0] and str(cand) in lines[0]


def test_a_broken_problem_is_a_problem_error_in_eval(tmp_path):
    assert "boom in get_inputs" in BROKEN
    prob = tmp_path / "prob.py"
    prob.write_text(BROKEN)
    p = dvk(["eval", prob, FIXTURES / "legit" / "relu_triton.py", "--device", "cpu", "--json"], timeout=300)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    res = json.loads(p.stdout)
    assert res["stage"] == "problem" and "boom in get_inputs" in res["error_msg"]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and "broken" in last and "boom in get_inputs" in last
    assert "Traceback" not in p.stderr


def test_bench_records_broken_problems_and_unreadable_candidates_and_goes_on(tmp_path):
    probs, cands = tmp_path / "problems" / "level1", tmp_path / "cands" / "level1"
    probs.mkdir(parents=True)
    cands.mkdir(parents=True)
    shutil.copy(FIXTURES / "tasks" / "relu.py", probs / "1_ReLU.py")
    (probs / "2_Broken.py").write_text(BROKEN)
    shutil.copy(FIXTURES / "tasks" / "relu.py", probs / "3_ReLU.py")
    (probs / "4_Bytes.py").write_bytes(NOT_UTF8)  # a problem file that is not text at all
    for name in ("1_ReLU", "2_Broken", "4_Bytes"):
        shutil.copy(FIXTURES / "legit" / "relu_triton.py", cands / f"{name}.py")
    (cands / "3_ReLU.py").write_bytes(NOT_UTF8)
    out = tmp_path / "run"
    p = dvk(["bench", "--suite", f"kernelbench:{tmp_path / 'problems'}", "--candidates", tmp_path / "cands",
             "--device", "cpu", "--workers", "1", "--no-compile", "--out", out, "--json"], timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = {r["task"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert rows["level1/1_ReLU"]["correct"] is True
    assert rows["level1/2_Broken"]["stage"] == "problem"
    assert rows["level1/3_ReLU"]["error_kind"] == "unreadable" and "not UTF-8" in rows["level1/3_ReLU"]["error_msg"]
    assert rows["level1/4_Bytes"]["stage"] == "problem" and not rows["level1/4_Bytes"]["correct"]


def test_skills_import_where_every_line_is_bad_exits_2(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": 1}\nnot json\n[1, 2]\n')
    p = dvk(["skills", "import", bad, "--db", tmp_path / "lib.db", "--no-seed"], timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("error:") and "none of its 3" in p.stderr
    # one good line among bad ones is a partial import: exit 0
    good = json.loads((FIXTURES.parent.parent / "davinci_kernel" / "skills" / "seed").glob("*.jsonl")
                      .__next__().read_text().splitlines()[0])
    bad.write_text(json.dumps(good) + "\nnot json\n")
    p = dvk(["skills", "import", bad, "--db", tmp_path / "lib.db", "--no-seed"], timeout=120)
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("args,fragment", [
    (["skills", "search", "relu", "-k", "-5"], "-k -5"),
    (["skills", "search", "relu", "-k", "0"], "-k 0"),
    (["skills", "list", "--step", "-3"], "--step -3"),
    (["skills", "show", "x", "--step", "-1"], "--step -1"),
    (["skills", "export", "out.jsonl", "--step", "-3"], "--step -3"),
])
def test_negative_counts_are_bad_input(args, fragment, tmp_path):
    p = dvk([*args, "--db", tmp_path / "lib.db"], timeout=120, cwd=tmp_path)
    assert p.returncode == 2, (p.returncode, p.stdout[-300:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and lines[0].startswith("error:")


@pytest.mark.parametrize("args", [["train", "rl", "--help"], ["tasks", "list"], ["skills", "list", "--json"]])
def test_a_closed_pipe_is_a_clean_exit(args, tmp_path):
    """`dvk ... | head -1`: the reader leaves early (here: before dvk wrote anything, so every
    write meets a closed pipe); dvk exits 0 without a traceback."""
    if args[0] == "skills":
        args = [*args, "--db", str(tmp_path / "lib.db")]
    proc = subprocess.Popen([sys.executable, "-m", "davinci_kernel.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={"COLUMNS": "80", **__import__("os").environ})
    proc.stdout.close()  # what head does once it has its line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err
