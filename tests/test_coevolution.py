"""bench/coevolution.py: the co-evolution experiment's protocol, its honesty by construction
(SFT data that never answer an evaluation task's first turn with its fast variant; arms one
switch apart), the loop's rows on the real rollout with a scripted model and a stand-in
judge, the verdict book, the success criteria, and the CPU smoke end to end."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from davinci_kernel.records import EvalResult

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import kernel_variants as kv  # noqa: E402
from coevo import book as B  # noqa: E402
from coevo import metrics as M  # noqa: E402
from coevo import protocol as P  # noqa: E402
from coevo import report as R  # noqa: E402
from coevo import sftdata as S  # noqa: E402

SCRIPT = ROOT / "bench" / "coevolution.py"
SOFTMAX = "level1/3_Softmax"


def _run(*args, timeout=120):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def real():
    """The committed protocol, its kernels and its tasks (no verdicts: CPU)."""
    p = P.protocol()
    cat = S.catalogue(p)
    tasks = {t.name: t for t in kv.load_tasks(list(p["eval_tasks"]) + p["practice_tasks"],
                                              Path(__import__("tempfile").mkdtemp()))}
    return p, cat, tasks


# ----------------------------------------------------------------------------- honesty
def test_no_sft_example_answers_an_evaluation_tasks_first_turn_with_its_fast_variant(real):
    """On the SFT data the protocol gives: every evaluation-task row's first answer is its
    slow, medium or a wrong variant, never the fast one; its prompt carries no skill; the
    fast variant appears only as a second turn, after "correct" feedback, in 2 of 5 answers;
    practice tasks are not evaluation tasks."""
    p, cat, tasks = real
    rows = S.sft_rows(p, tasks, cat, {})
    assert S.fast_turn1_violations(rows, p, cat) == []
    assert not set(p["practice_tasks"]) & set(p["eval_tasks"])
    for task in p["eval_tasks"]:
        k = S.by_role(cat[task])
        fast = kv.normalized(k["fast"]["source"])
        mine = [r for r in rows if r["task"] == task]
        assert mine and all(r["role"] == "policy" and "## Skills from the library" not in r["messages"][0]["content"]
                            for r in mine)
        for r in mine:
            answers = [m["content"] for m in r["messages"] if m["role"] == "assistant"]
            assert fast not in kv.normalized(answers[0]), (task, r["kind"])
        after_correct = [r for r in mine if r["kind"] == "eval_turn2" and r["turn1"] in (k["slow"]["name"],
                                                                                        k["medium"]["name"])]
        share = sum(r["answer"] == k["fast"]["name"] for r in after_correct) / len(after_correct)
        assert share == pytest.approx(p["sft"]["fast_share"])
        for r in mine:
            if r["answer"] == k["fast"]["name"]:  # turn 2 only, after the evaluator said "correct"
                assert r["kind"] == "eval_turn2" and "The kernel is correct" in r["messages"][-2]["content"]
                assert r["messages"][2].get("weight") == 0  # the first turn is context, not trained


def test_the_guard_catches_a_fast_first_turn(real):
    p, cat, tasks = real
    rows = S.sft_rows(p, tasks, cat, {})
    bad = json.loads(json.dumps(rows))
    i = next(i for i, r in enumerate(bad) if r["task"] == SOFTMAX and r["kind"] == "eval_turn1")
    bad[i]["messages"][-1]["content"] = "```python\n" + S.by_role(cat[SOFTMAX])["fast"]["source"] + "\n```"
    assert any("turn 1 is the fast variant" in v for v in S.fast_turn1_violations(bad, p, cat))


def test_run_json_records_arms_that_differ_in_exactly_one_field(tmp_path):
    """`plan` writes run.json with every arm x seed's full config; at each seed an arm differs
    from the full arm in exactly its one switch, and two seeds of an arm only in rl.seed."""
    r = _run("plan", "--dir", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    plan = json.loads((tmp_path / "run.json").read_text())
    p = plan["protocol"]
    assert set(plan["arms"]) == {f"{a}-s{s}" for a in P.ARMS for s in p["seeds"]} and len(p["seeds"]) >= 2
    want = {"no_admission": "skills.verify_min_speedup", "frozen": "rl.lr", "no_joint_training": "rl.joint_training"}
    for s in p["seeds"]:
        full = plan["arms"][f"full-s{s}"]["config"]
        for arm, key in want.items():
            assert list(P.config_diff(full, plan["arms"][f"{arm}-s{s}"]["config"])) == [key]
    for arm in P.ARMS:
        assert list(P.config_diff(plan["arms"][f"{arm}-s0"]["config"], plan["arms"][f"{arm}-s1"]["config"])) == [
            "rl.seed"]
    full = plan["arms"]["full-s0"]["config"]
    assert (full["rollout"]["turns"], full["rollout"]["k_schemes"], full["rollout"]["n_rollouts"],
            full["rollout"]["s_summaries"]) == (2, 2, 4, 2)
    assert full["skills"]["seed_library"] is False and full["skills"]["verify_min_gain"] == 1.2
    assert plan["arms"]["frozen-s0"]["config"]["rl"]["lr"] == 0.0


# ----------------------------------------------------------------------------- the loop, scripted
SPEED = {"slow": 0.4, "medium": 0.8, "fast": 1.3}


class Judge:
    """A stand-in evaluator: a Softmax variant's verdict by its role; counts what it judged."""

    class cfg:  # noqa: N801
        reuse_verdicts = False

    def __init__(self, cat):
        self.roles = {kv.normalized(k["source"]): k["role"] for k in cat[SOFTMAX]}
        self.judged: list[str] = []
        self.n_workers = 1

    def evaluate_many(self, items, progress=None):
        out = []
        for _, src in items:
            role = self.roles.get(kv.normalized(src), "other")
            self.judged.append(role)
            ok = role in SPEED
            out.append(EvalResult(task=SOFTMAX, compiled=True, correct=ok, trials=5, trials_passed=5 if ok else 0,
                                  speedup=SPEED.get(role), feedback="Status: correct." if ok else "wrong"))
        return out

    def close(self):
        pass


def _responder(cat):
    k = S.by_role(cat[SOFTMAX])
    code = {r: "```python\n" + k[r]["source"] + "\n```" for r in ("slow", "fast")}

    def respond(req):
        system = req.messages[0]["content"]
        if system.startswith("You pick optimization skills"):
            names = re.findall(r"^\d+\. (\S+) \[", req.messages[1]["content"], flags=re.M)
            return "<tool_call>\n" + json.dumps({"name": "select_skills", "arguments": {
                "think": "fits", "selected_skills": [{"name": n, "reason": "fits"} for n in names]}}) + "\n</tool_call>"
        if system.startswith("You curate a library"):
            best = req.messages[1]["content"].split("## Best attempt")[1].split("```python\n")[1].split("\n```")[0]
            skill = {"name": "softmax_one_pass_rows", "description": "For softmax modules: one program per row.",
                     "scope": "task_specific/softmax", "tags": ["softmax", "triton"],
                     "content": f"## Motivation\nRow softmax.\n## Key Idea\nOne pass.\n## Example\n```python\n{best}\n```"}
            return "<tool_call>\n" + json.dumps({"name": "update_skill_library", "arguments": {
                "think": "one pass", "new_skills": [skill]}}) + "\n</tool_call>"
        if "## Skills from the library" in system:
            return code["fast"]
        return code["slow"] if len(req.messages) == 2 else code["fast"]

    return respond


def test_the_loop_admits_a_verified_skill_then_selects_it_and_the_rows_say_so(real, tmp_path):
    """Two steps of the real rollout (T=2, k=2 + null, n=4, s=2) with a scripted model that
    writes slow then fast, and a stand-in judge: step 1 summarizes, verifies in a fresh
    evaluation (the fast source judged again, not reused), stages and commits one skill with
    its turn-1 baseline; step 2 selects it in every scheme and its turn 1 is fast there."""
    from davinci_kernel.llm.scripted import ScriptedBackend
    from davinci_kernel.rl.trainer import prepare_group
    from davinci_kernel.rollout import collect_groups
    from davinci_kernel.skills.admit import Admission
    from davinci_kernel.skills.store import open_store

    p, cat, tasks = real
    cfg = P.arm_config(P.protocol(), tmp_path, "full", 0)
    cfg.skills.db = str(tmp_path / "skills.db")
    judge = Judge(cat)
    book = B.VerdictBook(judge)
    store, adm = open_store(cfg.skills), Admission()
    backend = ScriptedBackend(_responder(cat))
    sources = {SOFTMAX: {k["name"]: k["source"] for k in cat[SOFTMAX]}}
    fast = {SOFTMAX: S.by_role(cat[SOFTMAX])["fast"]["name"]}
    first: dict = {}
    rows = []
    for step in (1, 2):
        before, fresh0 = store.all(), len(book.fresh)
        groups = collect_groups([tasks[SOFTMAX]], backend, store, book, adm, cfg, step=step)
        staged = dict(adm.staged)
        for g in groups:
            prepare_group(g, cfg, random.Random(0))
        written = adm.commit(store, step)
        rows.append(M.step_row("full", 0, step, groups, {"skills_admitted": len(written)}, cfg, before, store.all(),
                               staged, sources, fast, first, len(book.fresh) - fresh0))
    one, two = rows
    assert one["funnel"] == {"triggered": 1, "sampled": 2, "parsed": 2, "proposed": 2, "filtered": 2,
                             "regenerated": 2, "verified": 2, "staged": 1, "committed": 1}
    (a,) = one["admissions"]
    assert (a["task"], a["step"], a["turn1_baseline"], a["verify_speedup"]) == (SOFTMAX, 1, 0.4, 1.3)
    assert one["library_size"] == 1 and one["admitted"] == 1 and one["turn1_fast_1.2"] == 0.0
    assert one["best_fast_1.2"] == 1.0 and one["turn1_speedup"] == pytest.approx(0.4)
    # step 1's rollouts judged slow and fast once each, its verification the fast source again (fresh);
    # step 2's rollouts reused those verdicts, its verification judged the fast source anew once more
    assert judge.judged == ["slow", "fast", "fast", "fast"] and len(book.fresh) == 2
    assert one["fresh_verifications"] == two["fresh_verifications"] == 1
    assert one["admitted_share_of_schemes"] == 0.0 and one["selected_schemes"] == 0  # an empty library at step 1
    assert two["admitted_share_of_schemes"] == 1.0 and two["own_task_skill_share_of_schemes"] == 1.0
    assert two["turn1_fast_1.2_with_admitted"] == 1.0 and two["turn1_fast_1.2_without_admitted"] == 0.0
    assert two["turn1_fast_1.2"] == pytest.approx(8 / 12)  # the two selected schemes of three
    assert two["selection"]["with_admitted"]["schemes"] == 2 and two["selection"]["with_admitted"]["reward"] > 0
    assert two["per_task"][SOFTMAX]["first_admission_step"] == 1
    assert two["per_task"][SOFTMAX]["turn1_fast_variant_share"] == pytest.approx(8 / 12)
    assert two["funnel"]["committed"] == 0 and two["library_size"] == 1  # the same skill again: a near duplicate
    store.close()


# ----------------------------------------------------------------------------- the verdict book
def test_the_book_reuses_verdicts_for_rollouts_and_never_for_verification(real):
    p, cat, tasks = real
    judge = Judge(cat)
    book = B.VerdictBook(judge)
    fast = S.by_role(cat[SOFTMAX])["fast"]["source"]
    item = (tasks[SOFTMAX], fast)
    a, b = book.evaluate_many([item, item])
    assert judge.judged == ["fast"] and not a.reused and b.reused is False  # one judging for both
    (c,) = book.evaluate_many([item])
    assert c.reused and c.speedup == 1.3 and judge.judged == ["fast"]
    x, y = book.evaluate_fresh([item, item])
    assert judge.judged == ["fast", "fast"] and not x.reused and not y.reused and len(book.fresh) == 1
    book.remember(tasks[SOFTMAX], "seeded", EvalResult(correct=True, speedup=9.0))
    (d,) = book.evaluate_many([(tasks[SOFTMAX], "seeded")])
    assert d.reused and d.speedup == 9.0
    (e,) = book.evaluate_fresh([(tasks[SOFTMAX], "seeded")])
    assert not e.correct and judge.judged[-1] == "other"


def test_the_book_refuses_an_evaluator_that_reuses_on_its_own(real):
    class Reusing(Judge):
        class cfg:  # noqa: N801
            reuse_verdicts = True

    with pytest.raises(ValueError, match="reuse_verdicts=false"):
        B.VerdictBook(Reusing(real[1]))


# ----------------------------------------------------------------------------- criteria
def _row(arm, seed, step, fast12, admitted=0, share=0.0):
    return {"arm": arm, "seed": seed, "step": step, "turn1_fast_1.2": fast12, "admitted": admitted,
            "admitted_share_of_schemes": share, "library_size": admitted, "best_fast_1.2": fast12}


def test_success_is_a_function_of_the_json_with_its_numbers():
    rows = [_row("full", 0, 1, 0.0, 1, 0.0), _row("full", 0, 2, 0.6, 0, 0.8), _row("full", 1, 1, 0.0), _row("full", 1, 2, 0.5),
            _row("no_admission", 0, 1, 0.0), _row("no_admission", 0, 2, 0.1), _row("no_admission", 1, 1, 0.0),
            _row("no_admission", 1, 2, 0.0), _row("no_joint_training", 0, 2, 0.3, 0, 0.1)]
    got = R.success({"rows": rows})
    by = {c["name"]: c for c in got["criteria"]}
    assert got["pass"] and by["full_admits"]["numbers"]["skills_committed_per_seed"] == {0: 1, 1: 0}
    n = by["turn1_fast_1.2_beats_no_admission"]["numbers"]
    assert n["step"] == 2 and n["difference_of_means"] == pytest.approx(0.5) and n["spread_across_seeds"] == pytest.approx(0.1)
    assert by["admitted_skills_picked_more_than_no_joint_training"]["numbers"]["full"] == pytest.approx(0.2)
    rows[3]["turn1_fast_1.2"] = 0.0  # now the full arm's seeds spread 0.6 apart: the margin no longer holds
    got = R.success({"rows": rows})
    assert not got["pass"] and [c["pass"] for c in got["criteria"]] == [True, False, True]
    assert any(line.startswith("FAIL  turn1_fast_1.2_beats_no_admission") for line in R.describe(got))
    assert not R.success({"rows": [_row("full", 0, 1, 0.0)]})["pass"]


# ----------------------------------------------------------------------------- command line
def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args, words in ((["arm", "--dir", tmp_path, "--arm", "full"], "needs --arm and --seed"),
                        (["arm", "--dir", tmp_path, "--arm", "full", "--seed", "7"], "one of the protocol's seeds"),
                        (["arm", "--dir", tmp_path, "--arm", "full", "--seed", "0"], "run the prepare command first"),
                        (["check"], "needs the result JSON"), (["check", tmp_path / "none.json"], "no result JSON"),
                        (["collect", "--dir", tmp_path], "no run.json")):
        r = _run(*args)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_tiny_smoke_end_to_end_on_cpu_and_reruns_keep_what_is_saved(tmp_path):
    """`all --tiny`: kernels judged on the CPU evaluator, SFT data and a tiny model, the four
    arms' RL steps on the real pipeline, the result JSON, table and plot. Then: a rerun of
    a finished arm leaves its rows as they are; an unfinished one whose row waits for its
    sealed checkpoint resumes from it; one without a checkpoint is refused unless --restart."""
    import time

    run, out = tmp_path / "run", tmp_path / "res" / "coevolution_tiny.json"
    t0 = time.monotonic()
    r = _run("all", "--tiny", "--dir", run, "--out", out, timeout=600)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    assert took < 240, took  # about 1 to 1.5 minutes on 2 cores; this only catches a run of the real sizes
    doc = json.loads(out.read_text())
    assert {"gpu", "torch", "date", "protocol", "rows", "runs", "success"} <= set(doc)
    assert doc["protocol"]["name"] == "coevolution-tiny" and len(doc["rows"]) == 4
    for row in doc["rows"]:
        assert {"arm", "seed", "step", "library_size", "admitted", "turn1_fast_1.2", "best_fast_1.2", "turn1_fast_1",
                "turn1_speedup", "admitted_share_of_schemes", "funnel", "admissions", "selection",
                "per_task"} <= set(row)
        assert row["turn1_samples"] == 3 * 2  # (k=2 + the null scheme) x n=2
    full = next(x for x in doc["runs"] if x["arm"] == "full")
    assert full["status"] == "done" and {"on", "off", "tasks"} <= set(full["final"])
    assert out.with_suffix(".png").stat().st_size > 0 and ("PASS" in r.stdout or "FAIL" in r.stdout)
    sft = [json.loads(line) for line in (run / "sft.jsonl").read_text().splitlines()]
    p = P.protocol(tiny=True)
    assert sft and S.fast_turn1_violations(sft, p, S.catalogue(p)) == []
    plan = json.loads((run / "run.json").read_text())
    full_cfg = plan["arms"]["full-s0"]["config"]
    assert all(len(P.config_diff(full_cfg, plan["arms"][f"{a}-s0"]["config"])) == 1 for a in P.ARMS[1:])

    rows = run / "rows" / "frozen-s0.json"
    kept = rows.read_text()
    r = _run("arm", "--tiny", "--dir", run, "--arm", "frozen", "--seed", "0")
    assert r.returncode == 0 and "kept as it is" in r.stdout and rows.read_text() == kept

    doc = json.loads(rows.read_text())  # killed after the checkpoint, before the row was written
    row = doc["steps"].pop()
    doc["status"], doc["final"] = "running", None
    rows.write_text(json.dumps(doc))
    (run / "work" / "frozen-s0" / "pending-row.json").write_text(json.dumps({"step": 1, "row": row}))
    r = _run("arm", "--tiny", "--dir", run, "--arm", "frozen", "--seed", "0", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    again = json.loads(rows.read_text())
    assert again["status"] == "done" and again["steps"] == [row] and again["calls"][-1]["from_step"] == 1

    again["status"] = "running"
    rows.write_text(json.dumps(again))
    import shutil

    shutil.rmtree(run / "work" / "frozen-s0" / "checkpoints")
    r = _run("arm", "--tiny", "--dir", run, "--arm", "frozen", "--seed", "0")
    assert r.returncode == 2 and "--restart" in r.stderr and json.loads(rows.read_text()) == again
    r = _run("arm", "--tiny", "--dir", run, "--arm", "frozen", "--seed", "0", "--restart", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((run / "rows" / "frozen-s0.attempt-1.json").read_text()) == again
    assert json.loads(rows.read_text())["status"] == "done"


@pytest.mark.slow
def test_ctrl_c_is_one_line_exit_130_and_leaves_whole_files(tmp_path):
    """SIGINT while `prepare` judges the kernels: one line, exit 130, and every verdict line
    already written whole (a rerun continues from them)."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, str(SCRIPT), "prepare", "--tiny", "--dir", str(tmp_path)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    verdicts = tmp_path / "verdicts.jsonl"
    deadline = time.time() + 180
    while not (verdicts.is_file() and verdicts.read_text().strip()) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted during prepare" in err and "Traceback" not in err, err[-2000:]
    lines = verdicts.read_text().splitlines()
    assert lines and all(json.loads(line)["result"] for line in lines)
    assert not (tmp_path / "sft" / "model").exists()
