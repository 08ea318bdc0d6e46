"""bench/learning_run.py: the step rows of the learning run (which variant each policy
sample is, the verdicts to keep, the report's variant shares) and its CPU smoke end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import sigint_default

from davinci_kernel.records import Episode, EvalResult, TaskGroup, Turn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import learning_run as lr  # noqa: E402

FAST = "def kernel(x):\n    return x * 2\n"
SLOW = "def kernel(x):\n    y = x + x\n    return y\n"
SRCS = {"level1/a": {"fast": FAST, "slow": SLOW}}


def _turn(parsed, result=None, role="policy"):
    return Turn(role=role, task="level1/a", parsed=parsed, result=result)


def test_classify_ignores_whitespace_and_tells_other_code_from_none():
    assert lr.classify("def kernel(x):\n\n        return x * 2", SRCS["level1/a"]) == "fast"
    assert lr.classify(SLOW.replace("+", "-"), SRCS["level1/a"]) == "other"
    assert lr.classify(None, SRCS["level1/a"]) == lr.classify("", SRCS["level1/a"]) == "none"


def test_tally_counts_each_policy_turn_by_its_code_and_keeps_only_fresh_verdicts():
    """A policy turn's ``parsed`` is its code (a string): each counts once under its variant,
    code nobody wrote as a variant under 'other', a reply without code under 'none'; a
    verdict given this step is kept for DIR/verdicts.jsonl, a reused one is not."""
    fresh = EvalResult(correct=True, speedup=1.5)
    reused = EvalResult(correct=True, speedup=0.5, reused=True)
    group = TaskGroup(task="level1/a", episodes=[
        Episode(task="level1/a", scheme=0, rollout=0, turns=[_turn(FAST, reused)]),
        Episode(task="level1/a", scheme=0, rollout=1, turns=[_turn("  " + FAST, reused)]),
        Episode(task="level1/a", scheme=1, rollout=0, turns=[_turn(SLOW + "# tuned\n", fresh)]),
        Episode(task="level1/a", scheme=1, rollout=1, turns=[_turn(None)]),
    ])
    shares, new = lr.tally([group], SRCS)
    assert shares == {"level1/a": {"fast": 2, "other": 1, "none": 1}}
    assert [(r["task"], r["source"], r["result"]["speedup"]) for r in new] == [("level1/a", SLOW + "# tuned\n", 1.5)]


def test_summary_counts_follow_each_summary_from_reply_to_stage():
    """A group whose trigger fired: of three summaries one failed to parse, two proposed
    three skills; one skill was stopped by the content filter (no re-generation), two were
    re-generated, one of them staged. A group without summaries adds nothing."""
    from davinci_kernel.records import Completion

    def summ(error=None, n=0):
        return Turn(role="summary", task="level1/a", parse_error=error, parsed={"skills": [{}] * n})

    def ver(regenerated, staged):
        return Turn(role="verify", task="level1/a", completion=Completion(text="x") if regenerated else None,
                    parsed={"skill": "s", "staged": staged})

    fired = TaskGroup(task="level1/a", summaries=[summ("no tool call"), summ(n=2), summ(n=1)],
                      verifications=[ver(False, False), ver(True, True), ver(True, False)])
    quiet = TaskGroup(task="level1/b")
    assert lr.summary_counts([fired, quiet]) == {"triggered": 1, "sampled": 3, "parsed": 2, "proposed": 3,
                                                 "regenerated": 2, "staged": 1}


def test_variant_shares_follow_the_evaluators_verdicts_of_the_variants():
    """The fastest variant is the correct one the evaluator timed fastest; a variant the
    evaluator judged correct counts as correct whatever its name says."""
    table = [{"task": "t", "variant": "fused", "correct": True, "speedup": 2.0},
             {"task": "t", "variant": "slow", "correct": True, "speedup": 0.5},
             {"task": "t", "variant": "wrong_but_passes", "correct": True, "speedup": 3.0},
             {"task": "t", "variant": "wrong", "correct": False, "speedup": None}]
    kinds = lr._kinds(table)
    assert kinds["t"]["fastest"] == "wrong_but_passes" and kinds["t"]["wrong"] == {"wrong"}
    got = lr._variant_shares({"t": {"fused": 2, "wrong_but_passes": 1, "wrong": 3, "other": 2}}, kinds)
    assert got == {"share/fastest_variant": 1 / 8, "share/wrong_variant": 3 / 8}
    assert lr._variant_shares({}, kinds) == {"share/fastest_variant": 0.0, "share/wrong_variant": 0.0}


@pytest.mark.slow
def test_tiny_learning_run_end_to_end_on_cpu(tmp_path):
    """Every phase on the CPU with a tiny model (two tasks): variants judged, SFT, the two
    arms in one process sharing one evaluator, the report's JSON and plot."""
    run, res = tmp_path / "run", tmp_path / "res"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "learning_run.py"), "all", "--tiny", "--dir", str(run),
                        "--results", str(res)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads((res / "learning_run_tiny.json").read_text())
    assert set(out["arms"]) == {"learn", "control"} and out["arms"]["control"]["lr"] == 0
    assert out["arms"]["learn"]["settings"]["arms"] == "both"
    for arm in out["arms"].values():
        (row,) = arm["steps"]
        assert set(row["shares"]) == {"level1/3_Softmax", "level1/4_LayerNorm"}
        assert row["gen_batches"] and all(b["n"] >= 1 for b in row["gen_batches"])
        assert set(row["summaries"]) == {"triggered", "sampled", "parsed", "proposed", "regenerated", "staged"}
    assert {"share/fastest_variant", "speedup/correct"} <= set(out["summary"]["learn"])
    assert (res / "learning_run_tiny.png").stat().st_size > 0
    assert len(out["variants"]["variants"]) == 10  # five variants of each of the two tasks


def test_bad_arguments_are_one_line_and_exit_2(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "learning_run.py"), "rl", "--steps", "0", "--dir",
                        str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "must be >= 1" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "learning_run.py"), "report", "--dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "no arm-*.json" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "learning_run.py"), "rl", "--dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "run the sft phase first" in p.stderr and "Traceback" not in p.stderr


def test_a_rerun_of_the_rl_phase_keeps_an_arm_already_run(tmp_path):
    """An arm's results are not overwritten by running the phase again without --overwrite."""
    (tmp_path / "sft" / "model").mkdir(parents=True)
    arm = tmp_path / "arm-control.json"
    arm.write_text('{"arm": "control", "steps": []}')
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "learning_run.py"), "rl", "--dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "arm-control.json already in" in p.stderr and "--overwrite" in p.stderr
    assert arm.read_text() == '{"arm": "control", "steps": []}'


def test_summary_answers_of_the_sft_data_are_skills_the_library_would_take(tmp_path):
    """For every task of the run, the summary agent's SFT answer parses as the summary
    agent's tool call and its one skill passes the admission's content filter (sections, an
    example that is a Triton kernel, no banned advice); its name differs per task."""
    from davinci_kernel.agents.summary import parse_summary
    from davinci_kernel.skills.admit import content_filter

    tasks = lr.manifest()
    objs = lr.load_tasks(tasks, tmp_path)
    names = set()
    for task in objs:
        best = lr.fastest_variant(tasks[task.name], task.name, None)
        code = lr.variant_sources({task.name: tasks[task.name]})[task.name][best["name"]]
        reply = "<tool_call>\n" + json.dumps(lr.skill_call(task, best, code)) + "\n</tool_call>"
        parsed = parse_summary(reply)
        assert parsed.error is None and not parsed.problems and len(parsed.skills) == 1, (task.name, parsed)
        (skill,) = parsed.skills
        assert content_filter(skill) is None, (task.name, content_filter(skill))
        assert "@triton.jit" in skill.content and "def " in skill.content
        names.add(skill.name)
    assert len(names) == len(objs)


def test_the_fastest_variant_is_the_measured_one_else_the_first_correct():
    vs = [{"name": "wrong", "correct": False}, {"name": "a", "correct": True}, {"name": "b", "correct": True}]
    assert lr.fastest_variant(vs, "t", None)["name"] == "a"
    assert lr.fastest_variant(vs, "t", {("t", "a"): 1.1, ("t", "b"): 2.0, ("t", "wrong"): 9.0})["name"] == "b"
    assert lr.fastest_variant(vs, "t", {("t", "a"): None})["name"] == "a"


def test_a_rerun_of_the_sft_phase_keeps_the_saved_model(tmp_path):
    model = tmp_path / "sft" / "model"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_text("weights")
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "learning_run.py"), "sft", "--dir", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "already in" in p.stderr and "--overwrite" in p.stderr
    assert (model / "model.safetensors").read_text() == "weights"


def test_ctrl_c_is_one_line_and_not_success(tmp_path):
    """SIGINT while the variants phase waits on the evaluator: one line naming the phase,
    exit 130, and no verdicts file from the interrupted phase."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "learning_run.py"), "variants", "--tiny", "--dir",
                             str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    deadline = time.time() + 120
    while not (tmp_path / "suite").is_dir() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)  # the suite folder is written just before the evaluator starts
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted during the variants phase" in err and "Traceback" not in err
    assert not (tmp_path / "verdicts.jsonl").exists() and not (tmp_path / "variants.json").exists()
