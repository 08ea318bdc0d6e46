"""`dvk report` reads exactly one result line per task (issue 16 item 6): a results.jsonl
with a repeated task, a line that is not an EvalResult record, or self-check lines among
real results is refused in one line with exit 2 (real `dvk` entry point, subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from davinci_kernel.records import EvalResult


def dvk(*args):
    return subprocess.run([sys.executable, "-m", "davinci_kernel.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def _row(task: str, correct: bool = True, speedup: float = 1.5, **extra) -> dict:
    r = EvalResult(task=task, level=1, compiled=True, correct=correct, stage="done", device="cuda",
                   trials=5, trials_passed=5 if correct else 0, timing_available=True,
                   runtime_ms=1.0, ref_runtime_ms=speedup, speedup=speedup).to_dict()
    r.update(extra)
    return r


def _write(run, lines) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "results.jsonl").write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))


def _refused(p, *words) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in p.stderr, p.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


GOOD = [_row("level1/1_ReLU"), _row("level1/2_Softmax", correct=False, speedup=None)]


@pytest.mark.parametrize("case,lines,words", [
    ("duplicate", GOOD + [_row("level1/1_ReLU", speedup=50.0)], ["level1/1_ReLU", "two lines (1 and 3)", "duplicates"]),
    ("not_json", GOOD + ['{"task": "level1/3_cut'], ["line 3", "not JSON"]),
    ("array", GOOD + ["[1, 2]"], ["line 3", "not an object"]),
    ("no_task", GOOD + [{"correct": True, "speedup": 50.0}], ["line 3", "no task name"]),
    ("unknown_key", GOOD + [_row("level1/3_GELU", forged_by="me")], ["line 3", "unknown key 'forged_by'"]),
    ("wrong_type", GOOD + [_row("level1/3_GELU", correct="yes")], ["line 3", "correct is str"]),
    ("self_check_mixed", GOOD + [_row("level1/3_GELU", self_check=True)], ["line 3", "self-check"]),
])
def test_report_refuses_unexpected_results(tmp_path, case, lines, words):
    run = tmp_path / case
    _write(run, lines)
    _refused(dvk("report", run), str(run / "results.jsonl"), *words)
    assert not (run / "report.html").exists()


def test_report_uses_one_line_per_task_and_group(tmp_path):
    """The same task in the ``last`` and ``best`` groups is one line per group, not a duplicate;
    each line counts once."""
    run = tmp_path / "run"
    _write(run, [_row("level1/1_ReLU", which="last", turn=3, skills=[]),
                 _row("level1/1_ReLU", which="best", turn=2, skills=["tiling"]),
                 _row("level1/2_Softmax", correct=False, speedup=None, which="last", turn=3, skills=[]),
                 _row("level1/2_Softmax", speedup=1.1, which="best", turn=1, skills=[]),
                 "", _row("level1/3_GELU", speedup=0.5, which="best", candidate="k/3.py")])
    p = dvk("report", run, "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["fastp"]["best"]["1"]["n"] == 3 and doc["fastp"]["best"]["1"]["fast_1"] == pytest.approx(2 / 3)
    assert doc["fastp"]["last"]["1"]["n"] == 2 and doc["fastp"]["last"]["1"]["fast_0"] == 0.5
    # the same task twice in one group is refused, whichever group
    _write(run, [_row("level1/1_ReLU", which="best"), _row("level1/1_ReLU", which="best", speedup=9.0)])
    _refused(dvk("report", run), "which=best", "duplicates")


def test_report_on_a_self_check_run_says_so(tmp_path):
    run = tmp_path / "run"
    _write(run, [_row("level1/1_ReLU", speedup=1.0, self_check=True),
                 _row("level1/2_Softmax", speedup=0.99, self_check=True)])
    p = dvk("report", run, "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert list(doc["fastp"]) == ["harness self-check"]
    assert any("not solutions" in n for n in doc["notes"])
