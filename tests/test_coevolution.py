"""bench/coevolution.py: the co-evolution experiment's protocol, its honesty by construction
(SFT data that never answer an evaluation task's first turn with its fast variant; arms one
switch apart), the loop's rows on the real rollout with a scripted model and a stand-in
judge, the verdict book, the success criteria, and the CPU smoke end to end."""

from __future__ import annotations

import json
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


# The v2 chain on a CPU, on library APIs only (no protocol task lists): an RL task (the
# built-in Swish chain, its bench/learning variants), a held-out sibling never trained on (the
# GELU fixture, kernels below), a scripted model and a stand-in judge inside the test.
RL_TASK = "level2/5_Swish_Scale_Clamp_Residual"
RL_VARIANTS = ROOT / "bench" / "learning" / "variants" / RL_TASK
HELD_OUT = ROOT / "tests" / "fixtures" / "tasks" / "gelu.py"
TECH_SPEED = {32: 0.5, 4096: 2.0}  # the stand-in judge's speedup by elements per program


def _norm(src: str) -> str:
    return " ".join(src.split())


GELU_KERNEL = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476)), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        gelu_kernel[(triton.cdiv(x.numel(), {block}),)](x, y, x.numel(), BLOCK={block}, num_warps={warps})
        return y
"""
# the technique of the Swish episode's slow -> fast step: one load, the chain in registers,
# one store, 4096 elements per program on 8 warps; a launch helper, not the task's forward
TECH_EXAMPLE = """@triton.jit
def chain_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)  # one load
    y = x * tl.sigmoid(x)  # ... the whole chain in registers ...
    tl.store(y_ptr + offs, y, mask=mask)  # one store


def launch(x, y):
    chain_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096, num_warps=8)
"""


class TechJudge:
    """A stand-in evaluator: a known source's verdict (correct, speedup by its BLOCK), any
    other source incorrect; logs (task, what, fresh) for every judging."""

    def __init__(self, known: dict):
        self.known = {(t, _norm(src)): what for (t, src), what in known.items()}
        self.log: list[tuple[str, str, bool]] = []
        self.n_workers = 1

    def _judge(self, items, fresh):
        out = []
        for task, src in items:
            what = self.known.get((task.name, _norm(src)), "other")
            self.log.append((task.name, what, fresh))
            block = int(re.search(r"BLOCK=(\d+)", src).group(1)) if what != "other" else None
            ok = what != "other"
            out.append(EvalResult(task=task.name, compiled=True, correct=ok, trials=5, trials_passed=5 if ok else 0,
                                  speedup=TECH_SPEED.get(block), feedback="Status: correct." if ok else "wrong"))
        return out

    def evaluate_many(self, items, progress=None):
        return self._judge(items, False)

    def evaluate_fresh(self, items, progress=None):
        return self._judge(items, True)

    def close(self):
        pass


def _tech_skill(name, example, motivation="A chain of elementwise ops, each its own kernel, or one launched "
                                          "with tiny blocks."):
    return {"name": name, "description": "For elementwise chains: one kernel, 4096 elements per program, 8 warps.",
            "scope": "general", "tags": ["elementwise", "fusion", "launch", "gelu", "swish"],
            "content": f"## Motivation\n{motivation}\n## Key Idea\nLoad once, compute the chain in registers, store "
                       f"once; launch BLOCK 4096 with num_warps 8.\n## Example\n```python\n{example}\n```"}


def _tech_responder(slow: str, fast: str, calls: dict):
    """The scripted model. Selection: every candidate. Summary: sample 0 pastes the whole
    best attempt (a ModelNew), sample 1 writes the technique. Policy: on the RL task slow
    at turn 1 and fast after feedback (fast at once when a skill is in its system prompt);
    on any other task the GELU kernel with the launch configuration of the skill in its
    system prompt (none: BLOCK 32 on 1 warp)."""

    def respond(req):
        system, user = req.messages[0]["content"], req.messages[1]["content"]
        if system.startswith("You pick optimization skills"):
            names = re.findall(r"^\d+\. (\S+) \[", user, flags=re.M)
            calls["select"].append(names)
            return "<tool_call>\n" + json.dumps({"name": "select_skills", "arguments": {
                "think": "fits", "selected_skills": [{"name": n, "reason": "fits"} for n in names]}}) + "\n</tool_call>"
        if system.startswith("You curate a library"):
            i = len(calls["summary"])
            calls["summary"].append(i)
            best = user.split("## Best attempt")[1].split("```python\n")[1].split("\n```")[0]
            skill = (_tech_skill("swish_whole_kernel", best) if i % 2 == 0
                     else _tech_skill("fuse_elementwise_chain_block4096", TECH_EXAMPLE))
            return "<tool_call>\n" + json.dumps({"name": "update_skill_library", "arguments": {
                "think": "one kernel, big blocks", "new_skills": [skill]}}) + "\n</tool_call>"
        calls["policy"].append((RL_TASK in user, len(req.messages)))
        if RL_TASK in user:
            return "```python\n" + (fast if "## Skills from the library" in system or len(req.messages) > 2
                                    else slow) + "\n```"
        launch = re.search(r"BLOCK=(\d+), num_warps=(\d+)", system.split("## Skills from the library")[-1]) \
            if "## Skills from the library" in system else None
        block, warps = (launch.groups() if launch else ("32", "1"))
        return "```python\n" + GELU_KERNEL.replace("{block}", block).replace("{warps}", warps) + "\n```"

    return respond


def test_the_loop_admits_a_verified_skill_then_selects_it_and_the_rows_say_so(tmp_path):
    """The v2 chain, each link asserted. On an RL task (the Swish chain) a training step's
    episode goes slow -> fast and fires the summary; the summary whose Example is the whole
    best attempt (a ModelNew) is refused by the filter (example_defines_module, never
    verified); the one whose Example is the technique passes the filter, its Example pasted
    alone is judged (not correct: it solves nothing), its re-generation is verified fresh,
    and it is committed after the step. On the held-out sibling (the GELU fixture, never
    trained on), an evaluation group selects that skill, the policy's system prompt holds
    its content, and the turn-1 answer applies its launch configuration and is judged fast,
    while the null scheme's turn 1 stays slow; the groups' rows say so."""
    import asyncio

    from davinci_kernel.config import Config
    from davinci_kernel.llm.scripted import ScriptedBackend
    from davinci_kernel.records import Skill, TaskGroup
    from davinci_kernel.rollout import collect_groups
    from davinci_kernel.rollout.context import Context
    from davinci_kernel.rollout.group import GroupPlan, run_group
    from davinci_kernel.skills.admit import Admission, example_candidate
    from davinci_kernel.skills.store import SkillStore
    from davinci_kernel.tasks import load_task, load_task_file

    rl, held = load_task(RL_TASK), load_task_file(HELD_OUT)
    slow, fast = ((RL_VARIANTS / f"{v}.py").read_text() for v in ("slow_block32", "fused_block4096"))
    gelu = {b: GELU_KERNEL.replace("{block}", str(b)).replace("{warps}", str(w)) for b, w in ((32, 1), (4096, 8))}
    judge = TechJudge({(rl.name, slow): "slow", (rl.name, fast): "fast", (held.name, gelu[32]): "slow",
                       (held.name, gelu[4096]): "fast"})
    calls = {"select": [], "summary": [], "policy": []}
    backend = ScriptedBackend(_tech_responder(slow, fast, calls))
    cfg = Config()
    cfg.rollout.k_schemes, cfg.rollout.n_rollouts, cfg.rollout.turns, cfg.rollout.s_summaries = 2, 2, 2, 2
    cfg.skills.seed_library, cfg.skills.max_new_skills = False, 1
    store, adm = SkillStore(tmp_path / "skills.db"), Admission()

    # RL step 1 on the RL task: the library is empty, so no scheme holds a skill and nothing is selected
    (g,) = collect_groups([rl], backend, store, judge, adm, cfg, step=1)
    row = json.loads(json.dumps(g.to_dict()))  # the group's row, as groups.jsonl keeps it
    assert calls["select"] == [] and g.schemes == [[], [], []] and len(g.episodes) == 6
    for ep in g.episodes:  # slow -> fast
        assert [(t.result.correct, t.result.speedup) for t in ep.turns] == [(True, 0.5), (True, 2.0)]
    assert len(row["summaries"]) == 2 and all(not t["parse_error"] for t in row["summaries"])  # the summary fired
    refused, admitted = sorted(row["verifications"], key=lambda v: v["turn"])
    assert refused["parsed"]["skill"] == "swish_whole_kernel" and refused["kept"] is False
    assert refused["parsed"]["rule"] == "example_defines_module" and not refused["parsed"]["staged"]
    assert refused["parsed"]["reason"].startswith("example_defines_module: the Example defines ModelNew ")
    assert refused["completion"] is None and refused["result"] is None  # never re-generated nor judged
    tech = "fuse_elementwise_chain_block4096"
    assert admitted["parsed"]["skill"] == tech and admitted["parsed"]["staged"] and admitted["parsed"]["rule"] is None
    assert admitted["parsed"]["example_judged"] == {"correct": False, "speedup": None}  # pasted alone: solves nothing
    assert (admitted["result"]["correct"], admitted["result"]["speedup"]) == (True, 2.0)  # the re-generation
    assert _norm(admitted["parsed"]["code"]) == _norm(fast)
    # judged: 6 rollouts x (slow, fast), then fresh: the re-generation and the pasted Example, one batch
    assert sorted(judge.log[:12]) == [(rl.name, "fast", False)] * 6 + [(rl.name, "slow", False)] * 6
    assert judge.log[12:] == [(rl.name, "fast", True), (rl.name, "other", True)]
    cand = example_candidate(Skill.from_dict(_tech_skill(tech, TECH_EXAMPLE)))
    assert "return launch(*args[:max(2, min(len(inputs), 2))])" in cand
    assert [(d.skill, d.staged, d.rule) for d in adm.decisions] == [("swish_whole_kernel", False, "example_defines_module"),
                                                                     (tech, True, None)]
    assert store.names() == []  # nothing is written before the step's update
    written = adm.commit(store, step=1)
    assert [s.name for s in written] == [tech]
    lib = store.get(tech)
    assert (lib.source_task, lib.verify_speedup, lib.step) == (rl.name, 2.0, 1)

    # the held-out sibling, judged in evaluation only: one selection sample and the null scheme
    ctx = Context(backend, judge, cfg.rollout, cfg.reward, cfg.skills)
    plan = GroupPlan(k_schemes=1, null_scheme=True, n_rollouts=1, turns=1, summaries=False)
    calls["policy"].clear()
    h = asyncio.run(run_group(ctx, held, plan, store=store, step=2))
    hrow = TaskGroup.from_dict(json.loads(json.dumps(h.to_dict())))
    assert calls["select"] == [[tech]] and hrow.selections[0].parsed["selected"] == [tech]  # selection picks it
    assert hrow.schemes == [[tech], []] and [ep.skills for ep in hrow.episodes] == [[tech], []]
    with_skill, null = hrow.episodes
    system = with_skill.turns[0].messages[0]["content"]
    assert "## Skills from the library" in system and f"### {tech} [general]" in system
    body = lib.content.strip().replace("## ", "#### ")  # its content, its sections as sub-headings
    assert body in system and TECH_EXAMPLE.strip() in system
    assert "## Skills from the library" not in null.turns[0].messages[0]["content"]
    assert "BLOCK=4096, num_warps=8" in with_skill.turns[0].parsed  # the turn-1 answer applies the launch
    assert (with_skill.turns[0].result.correct, with_skill.turns[0].result.speedup) == (True, 2.0)
    assert (null.turns[0].result.correct, null.turns[0].result.speedup) == (True, 0.5)
    assert calls["policy"] == [(False, 2)] * 2  # two first turns on the held-out task, no feedback turn
    assert judge.log[14:] == [(held.name, "fast", False), (held.name, "slow", False)]
    assert not any(t == held.name for t, _, _ in judge.log[:14])  # the held-out task was never trained on
    fast12 = {tuple(ep.skills): float(ep.turns[0].result.speedup > 1.2) for ep in hrow.episodes}
    assert fast12 == {(tech,): 1.0, (): 0.0}  # turn-1 Fast_1.2 with the admitted skill, and without it
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
