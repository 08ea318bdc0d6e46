"""`dvk bench --candidates self` (issue 17 item 4): the harness self-check on the CPU through
the real entry point, its summary, its run directory kept apart from real runs, broken
problems as result lines; and the finished/why/spread rules of davinci_kernel.suite.selfcheck."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import FIXTURES

from davinci_kernel.suite import selfcheck


def dvk(*args):
    return subprocess.run([sys.executable, "-m", "davinci_kernel.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=900)


def lines(run):
    return [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines() if x.strip()]


BROKEN = {
    "2_InputsRaise.py": "def get_inputs():\n    raise RuntimeError('no inputs today')\n",
    "3_InputsNotTensors.py": "def get_inputs():\n    return ['a string', {'k': 1}]\n",
}


@pytest.fixture(scope="module")
def broken_suite(tmp_path_factory):
    root = tmp_path_factory.mktemp("selfsuite") / "problems"
    (root / "level1").mkdir(parents=True)
    relu = (FIXTURES / "tasks" / "relu.py").read_text()
    shutil.copy(FIXTURES / "tasks" / "relu.py", root / "level1" / "1_ReLU.py")
    for name, tail in BROKEN.items():
        body = relu.replace("def get_inputs():\n    return [torch.randn(batch_size, dim)]\n", tail)
        assert body != relu
        (root / "level1" / name).write_text(body)
    return root


def test_self_check_builtin_level1_all_finish(tmp_path):
    out = tmp_path / "run"
    p = dvk("bench", "--suite", "builtin", "--candidates", "self", "--device", "cpu", "--level", "1",
            "--out", out, "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout)
    sc = summary["harness_self_check"]
    assert summary["self_check"] is True and summary["candidates"] == "self" and "fast_p" not in summary
    assert sc["tasks"] == 10 and sc["finished"] == 10 and sc["unfinished"] == [], sc["unfinished"]
    assert sc["speedup"]["n"] == 0  # CPU: checked, not timed
    rows = lines(out)
    assert len(rows) == 10 and all(r["self_check"] and r["correct"] and r["candidate"] is None for r in rows)
    meta = json.loads((out / "run.json").read_text())
    assert meta["candidates"] == "self" and meta["self_check"] is True
    assert json.loads((out / "summary.json").read_text())["harness_self_check"]["finished"] == 10
    # the directory never takes a real run's results (nor a real run's directory self-check lines)
    before = (out / "results.jsonl").read_bytes()
    p = dvk("bench", "--suite", "builtin", "--candidates", "reference", "--device", "cpu", "--level", "1", "--out", out)
    assert p.returncode == 2 and "candidates" in p.stderr and "Traceback" not in p.stderr
    assert (out / "results.jsonl").read_bytes() == before
    # resumed with the same options: nothing re-run, the plain summary says what it is
    p = dvk("bench", "--suite", "builtin", "--candidates", "self", "--device", "cpu", "--level", "1", "--out", out)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "harness self-check" in p.stdout and "10 of 10 finished" in p.stdout and "Fast_p" not in p.stdout
    assert (out / "results.jsonl").read_bytes() == before


def test_self_check_broken_problems_are_result_lines(broken_suite, tmp_path):
    out = tmp_path / "run"
    p = dvk("bench", "--suite", f"kernelbench:{broken_suite}", "--candidates", "self", "--device", "cpu",
            "--workers", "1", "--out", out)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stdout
    rows = {r["task"]: r for r in lines(out)}
    assert set(rows) == {"level1/1_ReLU", "level1/2_InputsRaise", "level1/3_InputsNotTensors"}
    assert rows["level1/1_ReLU"]["correct"]
    for name in ("level1/2_InputsRaise", "level1/3_InputsNotTensors"):
        r = rows[name]
        assert not r["correct"] and r["stage"] and r["error_kind"] and r["error_msg"], r
    assert "no inputs today" in rows["level1/2_InputsRaise"]["error_msg"]
    assert "1 of 3 finished" in p.stdout and "did not finish (2)" in p.stdout
    assert "level1/2_InputsRaise: " in p.stdout and "level1/3_InputsNotTensors: " in p.stdout


def _row(**kw) -> dict:
    r = {"task": "level1/1_X", "level": 1, "correct": True, "self_check": True, "stage": "done", "device": "cuda:0",
         "trials": 5, "trials_passed": 5, "flags": [], "warnings": [], "error_kind": None, "error_msg": None,
         "timing_available": True, "speedup": 1.0, "verifiable": True}
    r.update(kw)
    return r


@pytest.mark.parametrize("row,finished,why", [
    (_row(), True, None),
    (_row(device="cpu", stage="correctness", timing_available=False, speedup=None), True, None),
    (_row(stage="correctness", timing_available=False, speedup=None), False, "not timed on the GPU"),
    (_row(correct=False, stage="reference", error_kind="reference_error", error_msg="get_inputs: boom"), False,
     "reference: reference_error: get_inputs: boom"),
    (_row(correct=False, stage="timing", error_kind="too_large", error_msg="needs 300 GB"), False, "too_large"),
    (_row(correct=False, trials_passed=3, error_kind="wrong_output"), False, "wrong_output"),
    (_row(correct=False, flags=["uninitialized_memory"]), False, "flagged uninitialized_memory"),
    (_row(self_check=False), False, "not a self-check result"),
    (_row(verifiable=False, correct=False), False, "cannot be checked"),
])
def test_verdict(row, finished, why):
    ok, got = selfcheck.verdict(row)
    assert ok is finished and (got == why if why is None else why in got), got


def test_summary_spread_and_named_references():
    rows = [_row(task=f"level1/{i}_T", speedup=s) for i, s in enumerate([0.97, 0.99, 1.0, 1.01, 1.5], 1)]
    rows.append(_row(task="level2/1_Mut", level=2, warnings=["reference_mutates_inputs: forward changed input 0"]))
    rows.append(_row(task="level2/2_Rand", level=2, correct=False, flags=["uninitialized_memory"]))
    sc = selfcheck.summarize(rows)
    assert sc["tasks"] == 7 and sc["finished"] == 6 and sc["timed"] == 6
    assert sc["levels"] == {"1": {"n": 5, "finished": 5}, "2": {"n": 2, "finished": 1}}
    s = sc["speedup"]
    assert (s["min"], s["median"], s["max"]) == (0.97, 1.0, 1.5) and s["within_2pct"] == pytest.approx(4 / 6)
    assert [u["task"] for u in sc["unfinished"]] == ["level2/2_Rand"]
    assert {(n["task"], n["note"].split(":")[0]) for n in sc["notes"]} == {
        ("level2/1_Mut", "input_mutation"), ("level2/2_Rand", "nondeterministic")}
    text = "\n".join(selfcheck.lines(sc))
    assert "6 of 7 finished" in text and "min 0.970x" in text and "within 1.00 ± 2%: 66.7%" in text
    assert "level2/2_Rand: " in text and "note: level2/1_Mut: input_mutation" in text


def test_resume_drops_a_line_cut_by_a_kill(tmp_path):
    """So that `dvk report`, which refuses lines that are not results, can read a resumed run."""
    from davinci_kernel.files import drop_cut_line
    from davinci_kernel.suite.bench import read_results

    p = tmp_path / "results.jsonl"
    p.write_text(json.dumps(_row(task="level1/1_A")) + "\n" + '{"task": "level1/2_B", "cor')
    drop_cut_line(p)
    assert p.read_text() == json.dumps(_row(task="level1/1_A")) + "\n" and list(read_results(p)) == ["level1/1_A"]
    drop_cut_line(p)  # whole lines stay as they are
    assert p.read_text().count("\n") == 1
    p.write_text('{"task": "cut')
    drop_cut_line(p)
    assert p.read_text() == ""


def test_a_retried_task_replaces_its_line_in_place(tmp_path):
    """`dvk bench --retry-failed`: the new line takes the old one's place (once, where the
    first stood); other lines, even ones that are not results, stay byte for byte."""
    from davinci_kernel.files import replace_jsonl_row

    p = tmp_path / "results.jsonl"
    a, b = _row(task="level1/1_A", correct=False), _row(task="level1/2_B")
    p.write_text(json.dumps(a) + "\n" + "not json\n" + json.dumps(b) + "\n" + json.dumps(a))  # a's last line unended
    new = {**a, "correct": True}
    replace_jsonl_row(p, "task", new)
    assert p.read_text().splitlines() == [json.dumps(new), "not json", json.dumps(b)]
    c = _row(task="level1/3_C")
    replace_jsonl_row(p, "task", c)  # none stood: appended
    assert p.read_text().splitlines()[-1] == json.dumps(c) and p.read_text().endswith("\n")
    assert not list(tmp_path.glob(".results.jsonl.*"))  # no temporary file left


def test_tasks_patterns_pick_problems_and_a_pattern_matching_none_is_exit_2(broken_suite, tmp_path):
    out = tmp_path / "run"
    p = dvk("bench", "--suite", f"kernelbench:{broken_suite}", "--candidates", "self", "--device", "cpu",
            "--workers", "1", "--tasks", "level1/1_*, *NotTensors", "--out", out)
    assert p.returncode == 0, p.stderr[-3000:]
    assert {r["task"] for r in lines(out)} == {"level1/1_ReLU", "level1/3_InputsNotTensors"}
    meta = json.loads((out / "run.json").read_text())
    assert meta["totals"] == {"1": 3} and meta["tasks"] == 2  # the level's size still counts every problem
    before = (out / "results.jsonl").read_bytes()
    for bad in ("level9/*", " , "):
        p = dvk("bench", "--suite", f"kernelbench:{broken_suite}", "--candidates", "self", "--device", "cpu",
                "--tasks", bad, "--out", out)
        assert p.returncode == 2 and "--tasks" in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
    assert (out / "results.jsonl").read_bytes() == before
    # the rest of the suite joins the same run directory later
    p = dvk("bench", "--suite", f"kernelbench:{broken_suite}", "--candidates", "self", "--device", "cpu",
            "--workers", "1", "--out", out)
    assert p.returncode == 0, p.stderr[-3000:]
    assert len(lines(out)) == 3
