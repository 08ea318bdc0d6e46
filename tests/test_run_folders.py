"""One command per run folder: the lock, resuming `dvk optimize`, what an interrupt says was
saved, no folder left by a command that failed before doing work, and the shared baseline
cache that two runs write at once (real files, real `dvk` processes, the CPU evaluator)."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import FIXTURES, RELU, relu_kernel, script_env, write_script, write_suite
from conftest import run_dvk as dvk

from davinci_kernel import locks
from davinci_kernel.evaluate.harness.baselines import BaselineCache
from davinci_kernel.rundir import LOCK_FILE

RESPOND = '''
def respond(request):
    log("call")
    return "Here:\\n```python\\n" + GOOD + "```"
'''


@pytest.fixture
def bench_suite(tmp_path):
    probs, cands = tmp_path / "problems" / "level1", tmp_path / "cands" / "level1"
    probs.mkdir(parents=True)
    cands.mkdir(parents=True)
    shutil.copy(FIXTURES / "tasks" / "relu.py", probs / "1_ReLU.py")
    shutil.copy(FIXTURES / "legit" / "relu_triton.py", cands / "1_ReLU.py")
    return ["bench", "--suite", f"kernelbench:{tmp_path / 'problems'}", "--candidates", str(tmp_path / "cands"),
            "--device", "cpu", "--workers", "1", "--no-compile"]


def test_a_locked_out_is_refused_in_one_line(bench_suite, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with locks.hold(out / LOCK_FILE, "test"):  # another command holds the folder
        p = dvk([*bench_suite, "--out", out], timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "in use by another dvk command" in lines[0] and str(out) in lines[0]
    assert not (out / "results.jsonl").exists()
    # free again: the same command runs
    p = dvk([*bench_suite, "--out", out], timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert len((out / "results.jsonl").read_text().splitlines()) == 1


def test_optimize_into_a_locked_out_is_refused(tmp_path):
    write_suite(tmp_path, {"1_ReLU": RELU})
    script = write_script(tmp_path / "model.py", RESPOND, GOOD=relu_kernel())
    out = tmp_path / "opt"
    out.mkdir()
    with locks.hold(out / LOCK_FILE, "test"):
        p = dvk(["optimize", tmp_path / "suite" / "level1" / "1_ReLU.py", "--model", f"script:{script}",
                 "--skills", "off", "--device", "cpu", "--out", out], script_env(tmp_path / "calls.log"), timeout=120)
    assert p.returncode == 2 and "in use" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "calls.log").exists()  # no model call was made


def test_a_command_that_fails_before_work_leaves_no_folder(bench_suite, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("needs a machine without a GPU (--device cuda must fail there)")
    out = tmp_path / "new" / "run"
    args = [a if a != "cpu" else "cuda" for a in bench_suite]
    p = dvk([*args, "--out", out], timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert not (tmp_path / "new").exists()  # neither the run folder nor the parent it made


def test_optimize_rerun_resumes_and_never_duplicates(tmp_path):
    write_suite(tmp_path, {"1_ReLU": RELU})
    script = write_script(tmp_path / "model.py", RESPOND, GOOD=relu_kernel())
    out, log = tmp_path / "opt", tmp_path / "calls.log"
    args = ["optimize", tmp_path / "suite" / "level1" / "1_ReLU.py", "--model", f"script:{script}", "--turns", "1",
            "--rollouts", "1", "--skills", "off", "--device", "cpu", "--workers", "1", "--out", out]
    p = dvk(args, script_env(log))
    assert p.returncode == 0, p.stderr[-3000:]
    assert log.read_text().split() == ["call"]
    first_best = (out / "best.py").read_text()
    log.write_text("")
    p = dvk(args, script_env(log))
    assert p.returncode == 0, p.stderr[-3000:]
    assert log.read_text() == ""  # the finished group was not run again
    assert "already holds" in p.stderr and "ok (untimed)" in p.stdout
    assert len((out / "groups.jsonl").read_text().splitlines()) == 1
    assert len((out / "results.jsonl").read_text().splitlines()) == 1
    assert (out / "best.py").read_text() == first_best
    assert json.loads((out / "run.json").read_text())["resumed"] == 1
    # a resumed run with other settings is refused, as for dvk run
    p = dvk([*args[:-2], "--turns", "2", "--out", out], script_env(log))
    assert p.returncode == 2 and "turns" in p.stderr
    p = dvk([*args, "rollout.temperature=0.5"], script_env(log))
    assert p.returncode == 2 and "rollout.temperature: 1.0 → 0.5" in p.stderr and log.read_text() == ""


def test_interrupt_after_a_finished_bench_says_what_was_saved(bench_suite, tmp_path, monkeypatch, capsys):
    """Ctrl-C after the last task finished (here: while the summary is written) reports the saved lines."""
    from davinci_kernel import cli
    from davinci_kernel.suite import bench

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "_summarize", interrupted)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        cli.main([*bench_suite, "--out", str(out)])
    assert e.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "nothing was saved" not in err and "1 task(s) in results.jsonl" in err, err
    assert len((out / "results.jsonl").read_text().splitlines()) == 1


def test_interrupt_before_any_work_removes_the_new_folder(bench_suite, tmp_path, monkeypatch, capsys):
    from davinci_kernel import cli
    from davinci_kernel.suite import bench

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "_make_evaluator", interrupted)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        cli.main([*bench_suite, "--out", str(out)])
    assert e.value.code == 130
    assert "nothing was saved" in capsys.readouterr().err and not out.exists()


def test_two_runs_sharing_the_baseline_cache_keep_each_others_entries(tmp_path):
    a, b = BaselineCache(str(tmp_path)), BaselineCache(str(tmp_path))  # two runs, opened at once
    a.put("task1|{}|cpu|2|m", {"eager_ms": 1.0})
    b.put("task2|{}|cpu|2|m", {"eager_ms": 2.0})
    assert b.get("task1|{}|cpu|2|m") == {"eager_ms": 1.0}  # a miss re-reads the file
    on_disk = json.loads((tmp_path / "baselines.json").read_text())
    assert set(on_disk) == {"task1|{}|cpu|2|m", "task2|{}|cpu|2|m"}
    assert BaselineCache(str(tmp_path)).get("task2|{}|cpu|2|m") == {"eager_ms": 2.0}


def test_train_into_a_locked_out_is_refused(tmp_path):
    from pathlib import Path

    tiny = Path(__file__).parents[1] / "configs" / "tiny-cpu.yaml"
    out = tmp_path / "rl"
    out.mkdir()
    with locks.hold(out / LOCK_FILE, "test"):
        p = dvk(["train", "rl", "--config", tiny, "--out", out, "rl.steps=1"], timeout=120)
    assert p.returncode == 2 and "in use by another dvk command" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not (out / "metrics.jsonl").exists()


def test_run_resume_after_a_cut_between_group_and_results_keeps_one_group_per_task(tmp_path):
    scale = RELU.replace('"""ReLU.', '"""Scale by two.').replace("torch.relu(x)", "x * 2.0")
    write_suite(tmp_path, {"1_ReLU": RELU, "2_Scale": scale})
    script = write_script(tmp_path / "model.py", RESPOND, GOOD=relu_kernel())
    out, log = tmp_path / "run", tmp_path / "calls.log"
    args = ["run", "--suite", f"kernelbench:{tmp_path / 'suite'}", "--model", f"script:{script}", "--skills", "off",
            "--turns", "1", "--device", "cpu", "--workers", "1", "--out", out]
    p = dvk(args, script_env(log))
    assert p.returncode == 0, p.stderr[-3000:]
    # an interrupt after the Scale task's group line was written and before its result lines were
    rows = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text("".join(x + "\n" for x in rows if "2_Scale" not in x))
    log.write_text("")
    p = dvk(args, script_env(log))
    assert p.returncode == 0, p.stderr[-3000:]
    assert log.read_text().split() == ["call"]  # only the Scale task was redone
    groups = [json.loads(x)["task"] for x in (out / "groups.jsonl").read_text().splitlines()]
    assert sorted(groups) == ["level1/1_ReLU", "level1/2_Scale"]
