"""The paper's ablations as `dvk run` switches, end to end on CPU with a scripted backbone.

``--select llm`` asks the selection agent (one model call per task) over the BM25
candidates; ``--select bm25`` takes the BM25 top skills with no such call; ``--select none``
opens no library and injects nothing; ``--no-seed`` starts a new library empty (so nothing
can be selected). The scripted model logs every call by role, which is how the tests count
backend calls. Two of the run directories are then compared by ``dvk report A B``.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import RELU, relu_kernel, script_env, write_script, write_suite
from conftest import run_dvk as dvk

RESPOND = '''
def respond(request):
    system = request.messages[0]["content"]
    role = "select" if "You pick optimization skills" in system else "policy"
    log(role)
    if role == "select":  # the first numbered candidate
        first = re.search(r"^1\\. (\\S+)", request.messages[1]["content"], re.M).group(1)
        return ('<tool_call>{"name": "select_skills", "arguments": {"think": "t", '
                '"selected_skills": [{"name": "%s", "reason": "r"}]}}</tool_call>' % first)
    return "```python\\n" + KERNEL + "```"
'''


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One real `dvk run` per setting over a one-task suite, one turn; the calls of each.

    Two runs at a time, each mostly waiting on its own processes' start-up: llm then bm25
    (the same library, seeded by the first), beside none then noseed (libraries of their own)."""
    tmp = tmp_path_factory.mktemp("ablations")
    write_suite(tmp, {"1_ReLU": RELU})
    script = write_script(tmp / "model.py", RESPOND, KERNEL=relu_kernel())
    settings = {"llm": ["--select", "llm", "--db", str(tmp / "seeded.db")],
                "bm25": ["--select", "bm25", "--db", str(tmp / "seeded.db")],
                "none": ["--select", "none", "--db", str(tmp / "unused.db")],
                "noseed": ["--no-seed", "--db", str(tmp / "empty.db")]}

    def one(name):
        log = tmp / f"{name}.log"
        env = script_env(log)
        p = dvk(["run", "--suite", f"kernelbench:{tmp / 'suite'}", "--model", f"script:{script}", "--turns", "1",
                 "--device", "cpu", "--workers", "1", "--out", str(tmp / name), *settings[name]], env)
        assert p.returncode == 0, (name, p.stderr[-3000:])
        rows = [json.loads(x) for x in (tmp / name / "results.jsonl").read_text().splitlines()]
        return {"dir": tmp / name, "calls": log.read_text().split(), "rows": rows, "stdout": p.stdout,
                "stderr": p.stderr, "meta": json.loads((tmp / name / "run.json").read_text())}

    def lane(names):
        return {name: one(name) for name in names}

    with ThreadPoolExecutor(max_workers=2) as ex:
        lanes = [ex.submit(lane, names) for names in (["llm", "bm25"], ["none", "noseed"])]
        out = {name: r for f in lanes for name, r in f.result().items()}
    out["tmp"] = tmp
    return out


def test_select_llm_asks_the_selection_agent(runs):
    r = runs["llm"]
    assert r["calls"] == ["select", "policy"]
    # the script picks 1 of the top 3 asked; the other 2 are completed in BM25 order (skills.allow_empty_pick off)
    assert len(r["rows"]) == 2 and all(len(row["skills"]) == 3 for row in r["rows"])
    assert r["meta"]["select"] == "llm" and r["meta"]["library"]["skills"] == 23  # seeded: the default
    assert "select llm" in " ".join(r["stdout"].split())
    group = json.loads((r["dir"] / "groups.jsonl").read_text().splitlines()[0])
    assert len(group["selections"][0]["parsed"]["filled"]) == 2
    assert "## Key Idea" in group["episodes"][0]["turns"][0]["messages"][0]["content"]  # the skill's content


def test_select_bm25_never_calls_the_rerank(runs):
    r = runs["bm25"]
    assert r["calls"] == ["policy"]
    skills = r["rows"][0]["skills"]
    assert len(skills) == 3  # the BM25 top skills, skills.max_selected of them
    assert runs["llm"]["rows"][0]["skills"][0] == skills[0]  # the rerank's pick was BM25's first
    group = json.loads((r["dir"] / "groups.jsonl").read_text().splitlines()[0])
    assert group["selections"] == [] and r["meta"]["select"] == "bm25"


def test_select_none_uses_no_skills_and_no_library(runs):
    r = runs["none"]
    assert r["calls"] == ["policy"]
    assert all(row["skills"] == [] for row in r["rows"])
    assert "library" not in r["meta"] and r["meta"]["select"] == "none"
    assert not (runs["tmp"] / "unused.db").exists()
    group = json.loads((r["dir"] / "groups.jsonl").read_text().splitlines()[0])
    policy_system = group["episodes"][0]["turns"][0]["messages"][0]["content"]
    assert "## Key Idea" not in policy_system  # no skill content injected


def test_no_seed_starts_from_an_empty_library(runs):
    r = runs["noseed"]
    assert r["meta"]["library"]["skills"] == 0 and r["meta"]["select"] == "llm"
    assert r["calls"] == ["policy"]  # nothing to select from: the selection agent is not asked
    assert all(row["skills"] == [] for row in r["rows"])
    p = dvk(["skills", "list", "--db", str(runs["tmp"] / "empty.db"), "--json"], dict(os.environ), timeout=120)
    assert p.returncode == 0 and json.loads(p.stdout) == []  # started empty: later opens do not seed it


def test_no_seed_on_a_library_with_skills_says_it_changes_nothing(runs, tmp_path):
    env = script_env(tmp_path / "log")
    p = dvk(["run", "--suite", f"kernelbench:{runs['tmp'] / 'suite'}", "--model",
             f"script:{runs['tmp'] / 'model.py'}", "--no-seed", "--db", str(runs["tmp"] / "seeded.db"),
             "--out", str(runs["llm"]["dir"]), "--select", "llm", "--device", "cpu", "--turns", "1"], env)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "--no-seed applies to a new library only" in p.stderr
    assert "0 run, 1 resumed" in p.stdout.replace("\n", " ")


@pytest.mark.parametrize("args,fragment", [
    (["--select", "random"], "--select random: use llm, bm25 or none"),
    (["--skills", "off", "--select", "bm25"], "--select bm25 needs --skills on"),
])
def test_bad_select_is_one_line_exit_2(args, fragment, tmp_path):
    p = dvk(["run", "--model", "script:x.py", *args, "--out", str(tmp_path / "r")], dict(os.environ), timeout=60)
    assert p.returncode == 2 and fragment in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert not (tmp_path / "r").exists()


def test_resume_with_another_select_is_refused(runs):
    p = dvk(["run", "--suite", f"kernelbench:{runs['tmp'] / 'suite'}", "--model",
             f"script:{runs['tmp'] / 'model.py'}", "--select", "bm25", "--out", str(runs["none"]["dir"]),
             "--device", "cpu", "--turns", "1"], script_env(os.devnull), timeout=120)
    assert p.returncode == 2 and "select='none'" in p.stderr


def test_report_compares_real_runs(runs, tmp_path):
    a, b = runs["none"]["dir"], runs["bm25"]["dir"]
    p = dvk(["report", str(a), str(b), "--json", "--out", str(tmp_path / "cmp")], dict(os.environ), timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert [r["meta"]["select"] for r in doc["runs"]] == ["none", "bm25"]
    for group in ("last", "best"):
        for label, run in (("A", a), ("B", b)):
            summary = json.loads((run / "summary.json").read_text())[group]  # what dvk run printed
            assert doc["fastp"][group][label] == summary
        diff = doc["diff"][group]["B-A"]
        assert diff["1"]["fast_0"] == 0.0 and diff["all"]["fast_0"] == 0.0  # both correct
        assert diff["1"]["fast_1"] is None  # CPU: nothing timed, so no difference either
    page = (tmp_path / "cmp" / "compare.html").read_text()
    assert "select none" in page and "select bm25" in page


def test_optimize_takes_the_same_no_seed(runs, tmp_path):
    log = tmp_path / "calls.log"
    p = dvk(["optimize", str(runs["tmp"] / "suite" / "level1" / "1_ReLU.py"), "--model",
             f"script:{runs['tmp'] / 'model.py'}", "--no-seed", "--db", str(tmp_path / "new.db"), "--turns", "1",
             "--rollouts", "1", "--schemes", "1", "--summaries", "1", "--device", "cpu", "--workers", "1",
             "--out", str(tmp_path / "opt")], script_env(log))
    assert p.returncode == 0, p.stderr[-2000:]
    # one (empty) scheme plus the null scheme, one rollout each; an empty library: no selection call
    assert log.read_text().split() == ["policy", "policy"]
    q = dvk(["skills", "list", "--db", str(tmp_path / "new.db"), "--json"], dict(os.environ), timeout=120)
    assert q.returncode == 0 and json.loads(q.stdout) == []


@pytest.mark.parametrize("select,calls,skills_per_scheme", [
    ("bm25", ["policy", "policy"], [3, 0]),  # one BM25 scheme (no rerank call) plus the null scheme
    ("none", ["policy"], [0]),  # the null scheme alone
])
def test_optimize_takes_the_same_select(runs, tmp_path, select, calls, skills_per_scheme):
    log = tmp_path / "calls.log"
    p = dvk(["optimize", str(runs["tmp"] / "suite" / "level1" / "1_ReLU.py"), "--model",
             f"script:{runs['tmp'] / 'model.py'}", "--select", select, "--db", str(tmp_path / "lib.db"),
             "--turns", "1", "--rollouts", "1", "--schemes", "1", "--summaries", "1", "--device", "cpu",
             "--workers", "1", "--out", str(tmp_path / "opt")], script_env(log))
    assert p.returncode == 0, p.stderr[-2000:]
    assert log.read_text().split() == calls
    group = json.loads((tmp_path / "opt" / "groups.jsonl").read_text().splitlines()[0])
    assert [len(s) for s in group["schemes"]] == skills_per_scheme and group["selections"] == []
    assert json.loads((tmp_path / "opt" / "run.json").read_text())["select"] == select


@pytest.mark.parametrize("args,fragment", [
    (["--select", "rerank"], "--select rerank: use llm, bm25 or none"),
    (["--skills", "off", "--select", "llm"], "--select llm needs --skills on"),
])
def test_optimize_bad_select_is_one_line_exit_2(runs, tmp_path, args, fragment):
    p = dvk(["optimize", str(runs["tmp"] / "suite" / "level1" / "1_ReLU.py"), "--model", "script:x.py", *args,
             "--out", str(tmp_path / "opt")], dict(os.environ), timeout=60)
    assert p.returncode == 2 and fragment in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert not (tmp_path / "opt").exists()
