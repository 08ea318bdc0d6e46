"""The CLI as a new user meets it (issue 18, and issue 17's bench resume), through the real
`dvk` entry point in subprocesses: Ctrl-C exits 130 with one line and records nothing it did
not finish, reruns resume or are refused, bad files and flags are one line with exit 2,
`--skills on|off` / `--db PATH` mean one thing everywhere, and CPU Fast_p reads n/a."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import FIXTURES, sigint_default

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = ROOT / "davinci_kernel" / "tasks" / "builtin"
TINY = str(ROOT / "configs" / "tiny-cpu.yaml")
NOT_UTF8 = b'"""caf\xe9"""\nimport torch\n'


def dvk(*args, timeout=300, cwd=None):
    return subprocess.run([sys.executable, "-m", "davinci_kernel.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


def dvk_each(*calls, timeout=300):
    """Independent `dvk` invocations, two at a time (each is mostly its own interpreter's
    start-up); their results in the order given."""
    with ThreadPoolExecutor(max_workers=2) as ex:
        return list(ex.map(lambda args: dvk(*args, timeout=timeout), calls))


def one_error_line(p, code=2) -> str:
    assert p.returncode == code, (p.returncode, p.stdout[-1000:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    return lines[0]


def results(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines() if x.strip()]


@pytest.fixture
def suite(tmp_path):
    """Two levels of one task each, and candidates for both."""
    for lvl in (1, 2):
        (tmp_path / "problems" / f"level{lvl}").mkdir(parents=True)
        (tmp_path / "cands" / f"level{lvl}").mkdir(parents=True)
        shutil.copy(FIXTURES / "tasks" / "relu.py", tmp_path / "problems" / f"level{lvl}" / "1_ReLU.py")
        shutil.copy(FIXTURES / "legit" / "relu_triton.py", tmp_path / "cands" / f"level{lvl}" / "1_ReLU.py")
    return tmp_path


# --------------------------------------------------------------------------- 1. Ctrl-C
def _interrupt_when(cmd, ready, timeout=240):
    """Start ``cmd`` in its own process group, wait for ``ready()``, then Ctrl-C the whole
    group as a terminal would (the workers get the signal too)."""
    p = subprocess.Popen([sys.executable, "-m", "davinci_kernel.cli", *map(str, cmd)], start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    deadline = time.time() + timeout
    while p.poll() is None and not ready() and time.time() < deadline:
        time.sleep(0.05)
    assert p.poll() is None, "finished before it could be interrupted: " + p.stderr.read()[-2000:]
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=120)
    return p.returncode, out, err


def test_bench_ctrl_c_exits_130_records_nothing_false_then_resumes(tmp_path):
    n = 4  # problems of one level, each a ReLU of its own (distinct sources), each with an honest kernel
    for i in range(1, n + 1):
        for folder, src in (("problems", FIXTURES / "tasks" / "relu.py"), ("cands", FIXTURES / "legit" / "relu_triton.py")):
            (tmp_path / folder / "level1").mkdir(parents=True, exist_ok=True)
            (tmp_path / folder / "level1" / f"{i}_ReLU{i}.py").write_text(f"# problem {i}\n" + src.read_text())
    out = tmp_path / "run"
    cmd = ["bench", "--suite", f"kernelbench:{tmp_path / 'problems'}", "--level", "1", "--candidates",
           tmp_path / "cands", "--device", "cpu", "--workers", "2", "--out", out]
    res_file = out / "results.jsonl"

    def two_done():
        return res_file.is_file() and len(res_file.read_text().splitlines()) >= 2

    code, stdout, stderr = _interrupt_when(cmd, two_done)
    assert code == 130, stderr[-2000:]
    last = [ln for ln in stderr.splitlines() if ln.strip()][-1]
    assert last.startswith("interrupted: ") and "tasks saved in" in last and "rerun with --out" in last, stderr
    assert "Traceback" not in stderr
    saved = results(out)
    assert saved, "the finished tasks were kept"
    # the candidates are all correct: any failure here would be fabricated by the interrupt
    assert all(r["correct"] and not r["flags"] and not r["error_kind"] for r in saved), saved
    assert "KeyboardInterrupt" not in res_file.read_text()
    assert not (out / "summary.json").exists()

    p = dvk(*cmd, "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    rows = results(out)
    names = [r["task"] for r in rows]
    assert len(names) == len(set(names)) == n, "each task once: the saved ones were not redone"
    assert {r["task"] for r in saved} <= set(names)
    assert all(r["correct"] for r in rows)
    summary = json.loads(p.stdout)
    assert summary["fast_p"]["all"]["fast_0"] == 1.0 and summary["resumed"] == 1


def test_eval_ctrl_c_exits_130(tmp_path):
    cand = tmp_path / "slow.py"  # keeps its worker busy at import (within the code policy) until interrupted
    cand.write_text((FIXTURES / "legit" / "relu_triton.py").read_text() + "\n_n = 0\nwhile _n >= 0:\n    _n += 1\n")
    t0 = time.time()
    code, stdout, stderr = _interrupt_when(["eval", FIXTURES / "tasks" / "relu.py", cand, "--device", "cpu"],
                                           lambda: time.time() - t0 > 5)
    assert code == 130, stderr[-2000:]
    assert [ln for ln in stderr.splitlines() if ln.strip()][-1].startswith("interrupted: ")
    assert stdout == ""


# --------------------------------------------------------------------------- issue 17.3: bench resumes
def test_bench_resume_adds_a_level_and_refuses_other_candidates(suite, tmp_path):
    out = tmp_path / "run"
    base = ["bench", "--suite", f"kernelbench:{suite / 'problems'}", "--candidates", suite / "cands",
            "--device", "cpu", "--workers", "1", "--out", out]
    p = dvk(*base, "--level", "1", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    assert [r["task"] for r in results(out)] == ["level1/1_ReLU"]
    p = dvk(*base, "--level", "2", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    assert [r["task"] for r in results(out)] == ["level1/1_ReLU", "level2/1_ReLU"], "level 1 was kept"
    summary = json.loads(p.stdout)
    assert summary["fast_p"]["all"]["n"] == 2 and summary["fast_p"]["all"]["fast_0"] == 1.0
    # CPU: correct but not timed, so Fast_p > 0 is unknown (null), not 0 %
    assert summary["fast_p"]["all"]["fast_1"] is None and "timing unavailable" in summary["note"]
    p = dvk(*base)  # everything done: nothing re-run
    assert p.returncode == 0 and len(results(out)) == 2
    assert "n/a" in p.stdout and "timing unavailable" in p.stdout

    # --retry-failed: a task whose line failed (here: a line made to say so) is judged again,
    # and its new line takes the old one's place; the other line stays as it was
    rows = results(out)
    rows[0].update(correct=False, error_kind="no_worker", stage="harness")
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept = (out / "results.jsonl").read_text().splitlines()[1]
    p = dvk(*base, "--retry-failed")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "1 that failed run again" in p.stderr
    again = results(out)
    assert [r["task"] for r in again] == ["level1/1_ReLU", "level2/1_ReLU"]
    assert again[0]["correct"] and again[0]["error_kind"] is None
    assert (out / "results.jsonl").read_text().splitlines()[1] == kept

    other = tmp_path / "other"
    shutil.copytree(suite / "cands", other)
    before = (out / "results.jsonl").read_bytes()
    other_cands, other_suite = dvk_each((*base[:4], other, *base[5:]), ("bench", "--suite", "builtin", *base[3:]))
    line = one_error_line(other_cands)
    assert "candidates" in line and "another --out" in line
    line = one_error_line(other_suite)
    assert "suite" in line
    assert (out / "results.jsonl").read_bytes() == before


def test_bench_says_how_many_candidates_are_missing(suite, tmp_path):
    cands = tmp_path / "misnamed" / "level1"
    cands.mkdir(parents=True)
    shutil.copy(FIXTURES / "legit" / "relu_triton.py", cands / "relu.py")
    p = dvk("bench", "--suite", f"kernelbench:{suite / 'problems'}", "--candidates", cands.parent,
            "--device", "cpu", "--out", tmp_path / "run", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "2 of 2 candidate files missing" in p.stderr
    assert "hint: no file matched" in p.stderr and "level1/relu.py" in p.stderr


# --------------------------------------------------------------------------- 3. bad input: one line, exit 2
def test_bad_files_are_one_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_bytes(NOT_UTF8)
    relu, cand = FIXTURES / "tasks" / "relu.py", FIXTURES / "legit" / "relu_triton.py"
    kb = tmp_path / "kb" / "level1"
    kb.mkdir(parents=True)
    (kb / "1_Bad.py").write_bytes(NOT_UTF8)
    data = tmp_path / "data.jsonl"
    data.write_bytes(b'{"messages": "\xff"}\n')
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    (eval_bad, eval_dir, eval_cand_dir, tasks_list, skills_add, rl_config, sft_data, bench_out,
     rl_out) = dvk_each(("eval", bad, cand, "--device", "cpu"), ("eval", tmp_path, cand, "--device", "cpu"),
                        ("eval", relu, tmp_path, "--device", "cpu"),
                        ("tasks", "list", "--suite", f"kernelbench:{kb.parent}"),
                        ("skills", "add", bad, "--db", tmp_path / "l.db"), ("train", "rl", "--config", bad),
                        ("train", "sft", "--config", TINY, f"sft.data=[{data}]", "--out", tmp_path / "sft"),
                        ("bench", "--device", "cpu", "--out", a_file / "run"),
                        ("train", "rl", "--config", TINY, "--out", a_file / "run"))
    assert "not UTF-8" in one_error_line(eval_bad)
    assert f"{tmp_path} is a directory" in one_error_line(eval_dir)
    assert "is a directory" in one_error_line(eval_cand_dir)

    assert "not UTF-8" in one_error_line(tasks_list)
    assert "not UTF-8" in one_error_line(skills_add)
    assert "not UTF-8" in one_error_line(rl_config)
    assert "not UTF-8" in one_error_line(sft_data)

    line = one_error_line(bench_out)
    assert "is a file, not a folder" in line
    line = one_error_line(rl_out)
    assert "is a file, not a folder" in line


@pytest.mark.parametrize("args", [
    ["tasks", "list", "--level", "9"],
    ["tasks", "list", "--level", "9", "--json"],
    ["bench", "--device", "cpu", "--level", "7"],
    ["run", "--model", "script:x.py", "--level", "9", "--device", "cpu"],
])
def test_a_level_without_tasks_is_exit_2_naming_the_levels(args, tmp_path):
    line = one_error_line(dvk(*args, cwd=tmp_path))
    assert "has no tasks at that level" in line and "levels 1, 2, 3" in line


# --------------------------------------------------------------------------- 2. train rl into an existing --out
def test_train_rl_refuses_an_existing_run_and_resumes_or_overwrites(tmp_path):
    out = tmp_path / "rl"
    args = ["train", "rl", "--config", TINY, "--out", out, "rl.eval_every=0"]
    p = dvk(*args, "rl.steps=2")
    assert p.returncode == 0, p.stderr[-2000:]
    metrics = (out / "metrics.jsonl").read_text()
    assert len(metrics.splitlines()) == 2

    line = one_error_line(dvk(*args, "rl.steps=1"))
    assert "--resume" in line and "--overwrite" in line
    assert (out / "metrics.jsonl").read_text() == metrics, "the run was left alone"

    p = dvk(*args, "rl.steps=2", "--resume")
    assert p.returncode == 0 and "is finished" in p.stderr, p.stderr[-2000:]
    assert (out / "metrics.jsonl").read_text() == metrics

    p = dvk(*args, "rl.steps=3", "--resume")
    assert p.returncode == 0, p.stderr[-2000:]
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]

    p = dvk(*args, "rl.steps=1", "--overwrite")
    assert p.returncode == 0, p.stderr[-2000:]
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1
    assert sorted(d.name for d in (out / "checkpoints").iterdir()) == ["step-1"], "no stale checkpoints"


# --------------------------------------------------------------------------- 4, 5. --skills / --db
def test_skills_flag_is_on_off_and_db_is_the_library(tmp_path):
    relu = FIXTURES / "tasks" / "relu.py"
    line = one_error_line(dvk("optimize", relu, "--model", "script:x.py", "--skills", tmp_path / "lib.db",
                              cwd=tmp_path))
    assert "--skills" in line and "--db" in line
    assert not (tmp_path / "on").exists()
    line = one_error_line(dvk("run", "--model", "script:x.py", "--skills", "maybe", cwd=tmp_path))
    assert "use on or off" in line


def test_optimize_default_runs_all_three_agents_on_a_library(tmp_path):
    script = tmp_path / "model.py"
    script.write_text("def respond(request):\n    return 'no code here'\n")
    out, db = tmp_path / "opt", tmp_path / "lib.db"
    p = dvk("optimize", FIXTURES / "tasks" / "relu.py", "--model", f"script:{script}", "--turns", "1",
            "--schemes", "1", "--rollouts", "1", "--summaries", "1", "--device", "cpu", "--workers", "1",
            "--db", db, "--out", out)
    assert p.returncode == 0, p.stderr[-3000:]
    meta = json.loads((out / "run.json").read_text())
    assert meta["skills"] == "on" and meta["db"] == str(db)
    group = json.loads((out / "groups.jsonl").read_text().splitlines()[0])
    assert len(group["episodes"]) == 2, "one selected scheme plus the null scheme"
    with sqlite3.connect(db) as con:  # the library was opened (and seeded)
        assert con.execute("SELECT COUNT(*) FROM skills").fetchone()[0] > 0


def test_db_that_is_not_a_library_is_refused_and_kept(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    for args in (["skills", "list"], ["skills", "import", FIXTURES / "tasks" / "relu.py"]):
        line = one_error_line(dvk(*args, "--db", notes))
        assert "not an SQLite skill library" in line
    assert notes.read_text() == "my notes\n"
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE t (x)")
    assert "not a skill library" in one_error_line(dvk("skills", "list", "--db", other))


def test_import_no_seed_and_export_parents(tmp_path):
    lib = tmp_path / "a.db"
    export = tmp_path / "new" / "dir" / "lib.jsonl"
    p = dvk("skills", "export", export, "--db", lib)
    assert p.returncode == 0 and export.is_file(), p.stderr
    assert "nothing was created" in p.stderr and not lib.exists()  # export only reads (issue 43)
    p = dvk("skills", "import", export, "--db", tmp_path / "b.db", "--no-seed", "--json")
    assert p.returncode == 0, p.stderr
    assert "warning" not in p.stderr
    doc = json.loads(p.stdout)
    assert doc["skipped"] == 0 and doc["imported"] == doc["library_size"] > 0


# --------------------------------------------------------------------------- 6. --timeout
def test_timeout_validated_and_shown(tmp_path):
    relu, cand = FIXTURES / "tasks" / "relu.py", FIXTURES / "legit" / "relu_triton.py"
    *bad, bench, help_ = dvk_each(*[("eval", relu, cand, "--device", "cpu", "--timeout", b) for b in ("0", "-1")],
                                  ("bench", "--device", "cpu", "--timeout", "0"), ("eval", "--help"))
    for p in bad:
        assert "--timeout" in one_error_line(p)
    assert "--timeout" in one_error_line(bench)
    h = help_.stdout
    assert "compile_timeout_s" in h and "run_timeout_s" in h


def test_timeout_covers_import(tmp_path):
    cand = tmp_path / "loop.py"  # a real candidate that never finishes importing
    cand.write_text((FIXTURES / "legit" / "relu_triton.py").read_text() + "\nwhile True:\n    pass\n")
    t0 = time.time()
    p = dvk("eval", FIXTURES / "tasks" / "relu.py", cand, "--device", "cpu", "--timeout", "5", "--json",
            timeout=150)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout)
    assert res["error_kind"] == "timeout" and not res["correct"]
    assert "--timeout 5" in res["error_msg"]
    assert time.time() - t0 < 100  # the compile/import limit was 180 s before


# --------------------------------------------------------------------------- 8. smaller
def test_version_and_help():
    cmds = (["eval"], ["bench"], ["optimize"], ["skills", "list"])
    p, *helps = dvk_each(("--version",), *[(*cmd, "--help") for cmd in cmds])
    assert p.returncode == 0 and p.stdout.startswith("dvk (davinci-kernel) ")
    helps = {" ".join(cmd): h.stdout for cmd, h in zip(cmds, helps)}
    for cmd in cmds:
        assert "<bool>" not in helps[" ".join(cmd)], cmd
    h = helps["eval"]
    assert "absolute tolerance" in h and "relative tolerance" in h
    h = helps["optimize"]
    assert "[default: 4]" in h and "[default: on]" in h
    assert "~/.cache/davinci_kernel/skills.db" in helps["skills list"]


def test_tests_use_a_temporary_home():
    import pwd

    real = Path(pwd.getpwuid(os.getuid()).pw_dir).resolve()
    home = Path(os.environ["HOME"]).resolve()
    assert home != real and real not in home.parents
    assert Path(os.environ["XDG_CACHE_HOME"]).resolve().is_relative_to(home)


# --------------------------------------------------------------------------- 7. n/a in tables and the page
def test_fastp_na_when_nothing_correct_was_timed():
    from davinci_kernel.report.fastp import fastp_table
    from davinci_kernel.report.page import fastp_html

    untimed = [{"task": "level1/a", "level": 1, "correct": True, "speedup": None},
               {"task": "level1/b", "level": 1, "correct": False, "speedup": None}]
    t = fastp_table(untimed)
    assert t[1]["fast_0"] == 0.5 and t[1]["fast_1"] is None and t["all"]["fast_2"] is None
    html = fastp_html("", t, (0.0, 1.0))
    assert ">n/a<" in html and "timing unavailable" in html
    wrong = [{"task": "level1/b", "level": 1, "correct": False, "speedup": None}]
    assert fastp_table(wrong)[1]["fast_1"] == 0.0  # nothing correct: 0 % is known
    timed = [{"task": "level1/a", "level": 1, "correct": True, "speedup": 1.5}]
    assert fastp_table(timed)[1]["fast_1"] == 1.0
