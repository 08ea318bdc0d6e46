"""bench/coevolution.py (protocol v2): the protocol's task sets, arms, seeds and tests; the SFT
data's three rules and the guard that catches each broken one; the loop's rows on the real
rollout with a scripted model and a stand-in judge; the verdict book; the margin rule
enforced (one line, nothing started); a run folder of another protocol version refused;
the pre-registered tests (a)-(e) and their bootstrap intervals against hand-computed
examples; the probe's go/no-go; the results file, PNGs and docs verdicts; the CPU smoke
end to end with its resume."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import sigint_default

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
    """The --tiny protocol (an RL task, its held-out sibling, a practice pair, all of existing
    variants), its kernels and its tasks (no verdicts: CPU)."""
    from coevo import catalog as C

    p = P.protocol(tiny=True)
    cat = C.catalogue(p)
    names = list(p["rl_tasks"]) + list(p["heldout_tasks"]) + p["practice_tasks"]
    tasks = {t.name: t for t in C.load_tasks(names, Path(__import__("tempfile").mkdtemp()))}
    return p, cat, tasks


# ----------------------------------------------------------------------------- the protocol
def test_protocol_v2_names_three_disjoint_task_sets_and_its_arms_seeds_and_tests():
    """Version 2; practice, RL and held-out tasks disjoint; every held-out task's sibling is an
    RL task with the same technique, and each technique has one RL task; four arms, 3 seeds
    (2 for no_joint_training); the margin rule's numbers; a final evaluation of >= 64 samples
    per held-out task; the five tests with a margin and a failure condition each; the probe's
    thresholds committed."""
    p = P.resolve(P.PROTOCOL, manifest={})
    assert p["version"] == 2 and P.protocol()["version"] == 2
    rl, held, practice = set(p["rl_tasks"]), set(p["heldout_tasks"]), set(p["practice_tasks"])
    assert not (rl & held or rl & practice or held & practice) and len(rl) == len(held) == 3
    assert "level1/3_Softmax" in practice and all(t in practice for t in p["practice_pairs"])
    for spec in p["heldout_tasks"].values():
        assert spec["technique"] == p["rl_tasks"][spec["sibling"]]["technique"]
    assert sorted(s["technique"] for s in p["rl_tasks"].values()) == sorted(p["techniques"])
    assert tuple(p["arms"]) == P.ARMS and {a: len(s) for a, s in p["seeds"].items()} == {
        "full": 3, "frozen": 3, "no_admission": 3, "no_joint_training": 2}
    assert len(P.all_seeds(p)) == 11
    r = p["margin_rule"]
    assert r["enforce"] and r["fast_min"] == pytest.approx(r["p"] * r["m"]) and r["fast_min"] == 1.56
    assert r["slow_medium_max"] == pytest.approx(r["p"] / r["m"], abs=1e-3)
    assert p["final_eval"]["samples"] >= 64 and set(p["final_eval"]["on"]) == set(P.ARMS)
    assert sorted(p["tests"]) == ["a_full_admits", "b_transfer", "c_full_vs_no_admission", "d_full_vs_frozen",
                                  "e_selection"]
    assert all({"statistic", "margin", "pass", "fail"} <= set(t) for t in p["tests"].values())
    assert p["probe"]["noskill_samples"] >= 64 and set(p["probe"]["go"]) == {
        "summary_share_min", "greedy_with_skill_fast", "noskill_fast_share_max", "rl_tasks_go_min"}
    assert p["rl"]["trainer"]["rl.loss_agg"] == "seq-mean-token-sum" and p["rl"]["trainer"]["rl.loss_scale"] == 1000
    assert p["rl"]["library_at_step_0"] == "distractors"


def test_resolve_takes_roles_and_practice_pairs_from_the_coevo_manifest():
    man = {"level2/6_RMSNorm_SiLU_Gate": [
        {"name": "s3", "role": "slow"}, {"name": "m2", "role": "medium"}, {"name": "f1", "role": "fast"},
        {"name": "w1", "role": "wrong"}, {"name": "w2", "role": "wrong"}],
        "level1/21_Mish_Residual": [{"name": "lacking_two_kernels", "role": "lacking",
                                     "technique": "fuse_elementwise_chain"},
                                    {"name": "with_fused", "role": "with", "technique": "fuse_elementwise_chain"}]}
    p = P.resolve(P.PROTOCOL, manifest=man)
    assert p["rl_tasks"]["level2/6_RMSNorm_SiLU_Gate"]["roles"] == {"slow": "s3", "medium": "m2", "fast": "f1",
                                                                     "wrong": ["w1", "w2"]}
    assert p["practice_pairs"]["level1/21_Mish_Residual"] == {"technique": "fuse_elementwise_chain",
                                                              "lacking": ["lacking_two_kernels"], "with": "with_fused"}
    assert p["practice_tasks"][-1] == "level1/21_Mish_Residual"
    assert p["rl_tasks"]["level2/1_Linear_Bias_GELU"]["roles"]["fast"] == "fused_tile128"  # not in the manifest


def test_distractors_load_as_a_library_and_are_bm25_plausible_for_every_rl_and_heldout_task(tmp_path):
    from coevo import catalog as C

    from davinci_kernel.skills.bm25 import tokenize
    from davinci_kernel.skills.store import SkillStore

    with SkillStore(tmp_path / "s.db") as store:
        n, errors = store.import_jsonl(P.DISTRACTORS, step=0)
    assert n == len(C.distractors()) >= 5 and errors == []
    words = {w for s in C.distractors() for w in tokenize(s["description"] + " " + " ".join(s["tags"]))}
    for task in list(P.PROTOCOL["rl_tasks"]) + list(P.PROTOCOL["heldout_tasks"]):
        name = set(tokenize(task.split("_", 1)[1].replace("_", " ")))
        assert name & words, task


# ----------------------------------------------------------------------------- SFT data
def test_sft_rows_keep_the_three_rules(real):
    """RL task: turn 1 slow/medium/wrong only, fast only at turn 2 after "correct" feedback
    (2 of 5); held-out tasks absent; practice rows teach applying the technique's skill
    (Example = the snippet) to a kernel lacking it, summarizing into that skill, and picking
    it over distractors; the guard finds nothing."""
    from coevo import catalog as C

    p, cat, tasks = real
    rows = S.sft_rows(p, tasks, cat, {})
    assert S.violations(rows, p, cat) == []
    (rl,), (held,) = p["rl_tasks"], p["heldout_tasks"]
    assert not any(r["task"] == held for r in rows)
    k = C.by_role(cat[rl])
    fast = kv.normalized(k["fast"]["source"])
    mine = [r for r in rows if r["task"] == rl]
    for r in mine:
        answers = [m["content"] for m in r["messages"] if m["role"] == "assistant"]
        assert fast not in kv.normalized(answers[0]) and "## Skills from the library" not in r["messages"][0]["content"]
        if r["answer"] == k["fast"]["name"]:
            assert r["kind"] == "rl_turn2" and "The kernel is correct" in r["messages"][-2]["content"]
            assert r["messages"][2].get("weight") == 0
    after = [r for r in mine if r["kind"] == "rl_turn2" and r["turn1"] in (k["slow"]["name"], k["medium"]["name"])]
    assert sum(r["answer"] == k["fast"]["name"] for r in after) / len(after) == pytest.approx(p["sft"]["fast_share"])
    tech = p["practice_pairs"]["level1/10_L2Normalize"]["technique"]
    skill = C.technique_skill(tech)
    apply = [r for r in rows if r["kind"].startswith("practice_apply")]
    assert apply and all(skill["content"].split("## Example")[1].strip()[:40] in r["messages"][0]["content"]
                         for r in apply)
    assert all(r["answer"] == "fused_one_pass" for r in apply)
    given = [r for r in rows if r["kind"] == "practice_apply_given_lacking"]
    assert given and "does not use the technique" in given[0]["messages"][1]["content"]
    (summ, *_) = [r for r in rows if r["kind"] == "practice_summary"]
    (got,) = json.loads(summ["messages"][-1]["content"].split("\n")[1])["arguments"]["new_skills"]
    assert got == skill and "class ModelNew" not in C.skill_example(got)
    sel = [r for r in rows if r["kind"] == "practice_select"]
    noise = {s["name"] for s in C.distractors()}
    for r in sel:
        listed = re.findall(r"^\d+\. (\S+) \[", r["messages"][1]["content"], flags=re.M)
        assert tech in listed and set(listed) - {tech} <= noise | set(p["techniques"]) and len(listed) >= 3
        assert r["answer"] == tech


def test_the_guard_catches_each_broken_rule(real):
    p, cat, tasks = real
    from coevo import catalog as C

    rows = S.sft_rows(p, tasks, cat, {})
    (rl,), (held,) = p["rl_tasks"], p["heldout_tasks"]

    def broken(kind, change):
        bad = json.loads(json.dumps(rows))
        i = next(i for i, r in enumerate(bad) if r["kind"] == kind)
        change(bad[i])
        return S.violations(bad, p, cat)

    fast = "```python\n" + C.by_role(cat[rl])["fast"]["source"] + "\n```"
    assert any("turn 1 is the fast variant" in v for v in broken("rl_turn1", lambda r: r["messages"][-1].update(
        content=fast)))
    held_fast = C.by_role(cat[held])["fast"]["source"]
    assert any("held-out" in v for v in broken("practice_reference", lambda r: r["messages"][-1].update(
        content="```python\n" + held_fast + "\n```")))
    assert any("a held-out task in the SFT data" in v for v in broken("practice_reference", lambda r: r.update(
        task=held)))
    lacking = "```python\n" + C.by_role(cat["level1/10_L2Normalize"])["lacking"][0]["source"] + "\n```"
    assert any("does not apply the technique" in v for v in broken("practice_apply_skill_alone",
                                                                    lambda r: r["messages"][-1].update(content=lacking)))

    def whole(r):
        call = json.loads(r["messages"][-1]["content"].split("\n")[1])
        s = call["arguments"]["new_skills"][0]
        s["content"] = s["content"].split("## Example")[0] + "## Example\n" + lacking.replace(
            "```python", "```python\n# BLOCK = triton.next_power_of_2(n); tl.sum")
        r["messages"][-1]["content"] = "<tool_call>\n" + json.dumps(call) + "\n</tool_call>"

    assert any("not the technique's snippet" in v for v in broken("practice_summary", whole))

    def distractor(r):
        call = json.loads(r["messages"][-1]["content"].split("\n")[1])
        call["arguments"]["selected_skills"] = [{"name": "tiny_blocks_for_occupancy", "reason": "x"}]
        r["messages"][-1]["content"] = "<tool_call>\n" + json.dumps(call) + "\n</tool_call>"

    assert any("the pick is not the skill" in v for v in broken("practice_select", distractor))
    assert any("fewer than 2" in v for v in S.violations(rows, dict(p, sft=dict(p["sft"], min_pairs=2)), cat))


@pytest.mark.skipif(not (P.COEVO / "variants" / "manifest.json").is_file(), reason="needs the new tasks' variants")
def test_the_committed_protocols_sft_data_keep_the_rules():
    """The full protocol's SFT data (every practice pair across the three techniques)."""
    from coevo import catalog as C

    p = P.protocol()
    cat = C.catalogue(p)
    names = list(p["rl_tasks"]) + list(p["heldout_tasks"]) + p["practice_tasks"]
    tasks = {t.name: t for t in C.load_tasks(names, Path(__import__("tempfile").mkdtemp()))}
    rows = S.sft_rows(p, tasks, cat, {})
    assert S.violations(rows, p, cat) == []
    assert {r["technique"] for r in rows if r["kind"].startswith("practice_apply")} == set(p["techniques"])


def test_the_families_grid_gets_apply_rows_only_and_is_not_judged_by_prepare():
    """A family's grid member (apply-only) teaches applying the skill to its forward; its
    kernels are judged on the CPU by the tests, not on the GPU by prepare."""
    from coevo import catalog as C
    from coevo import family
    from coevo.prepare import judged_kernels

    p = P.protocol()
    grid = {m.task for _, m in family.members() if not m.anchor}
    assert grid and grid == {t for t, pair in p["practice_pairs"].items() if pair.get("apply_only")}
    cat = C.catalogue(p)
    some = sorted(grid)[:3] + [t for t in p["practice_pairs"] if t not in grid][:2]
    tasks = {t.name: t for t in C.load_tasks(some, Path(__import__("tempfile").mkdtemp()))}
    for t in some:
        kinds = {r["kind"] for r in S.practice_rows(p, tasks[t], cat[t], {}, {x: C.technique_skill(x)
                                                                            for x in p["techniques"]},
                                                  C.distractors(), __import__("random").Random(0), 3, 2)}
        assert ("practice_summary" in kinds) is (t not in grid) and ("practice_select" in kinds) is (t not in grid)
        assert "practice_apply_skill_alone" in kinds
    assert not set(judged_kernels(p, cat)) & grid and set(cat) - set(judged_kernels(p, cat)) == grid


def test_run_json_records_arms_that_differ_in_exactly_one_field(tmp_path):
    """`plan` writes run.json with every arm x seed's full config; at each seed an arm differs
    from the full arm in exactly its one switch, and two seeds of an arm only in rl.seed."""
    r = _run("plan", "--dir", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    plan = json.loads((tmp_path / "run.json").read_text())
    p = plan["protocol"]
    assert p["version"] == 2 and {"practice_tasks", "rl_tasks", "heldout_tasks"} <= set(p)
    assert set(plan["arms"]) == {f"{a}-s{s}" for a, ss in p["seeds"].items() for s in ss} and len(plan["arms"]) == 11
    want = {"no_admission": "skills.verify_min_speedup", "frozen": "rl.lr", "no_joint_training": "rl.joint_training"}
    for s in (0, 1):
        full = plan["arms"][f"full-s{s}"]["config"]
        for arm, key in want.items():
            assert list(P.config_diff(full, plan["arms"][f"{arm}-s{s}"]["config"])) == [key]
    for arm in P.ARMS:
        assert list(P.config_diff(plan["arms"][f"{arm}-s0"]["config"], plan["arms"][f"{arm}-s1"]["config"])) == [
            "rl.seed"]
    full = plan["arms"]["full-s0"]["config"]
    assert (full["rollout"]["turns"], full["rollout"]["k_schemes"], full["rollout"]["n_rollouts"],
            full["rollout"]["s_summaries"], full["rl"]["batch_tasks"]) == (2, 2, 4, 2, 3)
    assert full["skills"]["seed_library"] is False and full["skills"]["verify_min_gain"] == 1.2
    assert full["rl"]["normalize_adv"] is True and full["rl"]["dynamic_sampling"] is True
    for key, value in p["rl"]["trainer"].items():  # the release's options the base has, applied
        if key in p["trainer_applied"]:
            section, name = key.split(".")
            assert full[section][name] == value
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


# ----------------------------------------------------------------------------- the tests (a)-(e)
def test_bootstrap_ci_against_hand_computed_examples():
    """One seed, one task, samples [1, 0]: a resample's mean is 0, 0.5 or 1 with chances
    1/4, 1/2, 1/4, so the 2.5th and 97.5th percentiles are 0 and 1. Constant samples give a
    point interval; a difference of constant groups is that difference. Seeds [1, 1, 0]
    (a share of seeds): all three drawn 0 has chance 1/27 > 2.5 %, all 1 has 8/27: [0, 1]."""
    from coevo import prereg as T

    assert T.bootstrap_ci({0: {"t": [1, 0]}}, resamples=2000) == (0.0, 1.0)
    assert T.bootstrap_ci({0: {"t": [1, 1, 1]}, 1: {"t": [1]}}, resamples=50) == (1.0, 1.0)
    lo, hi = T.bootstrap_ci({0: {"t": [1, 1]}}, {0: {"t": [0, 0, 0, 0]}, 1: {"t": [0]}}, resamples=50)
    assert (lo, hi) == (1.0, 1.0)
    assert T.bootstrap_ci({s: {"all": [v]} for s, v in enumerate([1, 1, 0])}, resamples=2000) == (0.0, 1.0)
    assert T.pooled({0: {"a": [1, 0, 0, 0]}, 1: {"a": [1, 1]}}) == pytest.approx(0.5)


def _final(on: list[int], off: list[int] | None = None, helpful: list[int] | None = None, task="level2/12_X",
           has_helpful=True) -> dict:
    def samples(xs, hs):
        return [{"fast": bool(x), "helpful": bool(h), "picked": [], "correct": bool(x), "speedup": None,
                 "distractor": False} for x, h in zip(xs, hs)]

    out = {"samples": {"on": {task: samples(on, helpful or [0] * len(on))}},
           "helpful_skills": {task: ["fuse_elementwise_chain"] if has_helpful else []}}
    if off is not None:
        out["samples"]["off"] = {task: samples(off, [0] * len(off))}
    return out


def test_the_five_tests_pass_and_fail_on_hand_made_results():
    from coevo import prereg as T

    p = P.protocol(tiny=True)
    rows = [{"arm": "full", "seed": s, "step": 1, "admitted": n} for s, n in ((0, 1), (1, 0), (2, 2))]
    on, off = [1] * 6 + [0] * 2, [0] * 8
    finals = {"full": {s: _final(on, off, [1] * 8) for s in (0, 1, 2)},
              "no_admission": {s: _final([0] * 8) for s in (0, 1, 2)},
              "frozen": {s: _final([1] * 6 + [0] * 2) for s in (0, 1, 2)},
              "no_joint_training": {s: _final([0] * 8, helpful=[1, 0, 0, 0, 0, 0, 0, 0]) for s in (0, 1)}}
    got = {t["name"]: t for t in T.run_all(rows, finals, p)}
    assert [t["verdict"] for t in got.values()] == ["pass", "pass", "pass", "fail", "pass"]
    a = got["a_full_admits"]
    assert a["numbers"]["seeds_admitting"] == 2 and a["ci95"] == [0.0, 1.0] and a["margin"] == 2
    b = got["b_transfer"]
    assert b["numbers"]["difference"] == pytest.approx(0.75) and b["ci95"][0] > 0 and b["numbers"]["samples_library_on"] == 24
    d = got["d_full_vs_frozen"]
    assert d["numbers"]["difference"] == 0.0 and d["ci95"][0] <= 0  # RL added nothing: the failure stated in advance
    e = got["e_selection"]
    assert e["numbers"]["full"] == 1.0 and e["numbers"]["no_joint_training"] == pytest.approx(1 / 8)
    for t in got.values():
        assert {"name", "verdict", "margin", "ci95", "numbers", "fail_if"} <= set(t)
    rows[2]["admitted"] = 0  # one seed of three admits: (a) fails
    finals["no_joint_training"] = {s: _final([0] * 8, has_helpful=False) for s in (0, 1)}  # nothing to pick
    got = {t["name"]: t for t in T.run_all(rows, finals, p)}
    assert got["a_full_admits"]["verdict"] == "fail" and got["e_selection"]["verdict"] == "fail"
    assert "not measurable" in got["e_selection"]["why"]
    empty = T.run_all([], {}, p)
    assert all(t["verdict"] == "fail" and t["why"].startswith("not run yet") for t in empty[:4])


def test_probe_decides_go_by_the_committed_thresholds():
    from coevo import probe as Q

    p = P.protocol()
    good = {"summary_share": 0.5, "greedy_with_skill_fast": True, "noskill_fast_share": 0.05}
    tasks = {"a": dict(good), "b": dict(good), "c": dict(good, summary_share=0.1)}
    e = Q.entry(p, tasks, "h200", "NVIDIA H200", date="2026-12-06")
    assert e["go"] and e["tasks_go"] == {"a": True, "b": True, "c": False}
    assert (e["summary_share"], e["greedy_with_skill_fast_share"], e["noskill_fast_share"]) == (
        pytest.approx(1.1 / 3), 1.0, pytest.approx(0.05))
    assert {"date", "card", "go"} <= set(e) and e["why"] == ["c: summary_share 0.10 < 0.25"]
    tasks["b"]["noskill_fast_share"] = 0.5  # fast anyway: transfer could not be told from recall
    e = Q.entry(p, tasks, "h200", "NVIDIA H200")
    assert not e["go"] and any("sftdata.py" in c for c in e["change"]) and len(e["why"]) == 2
    assert not Q.decide(p, {"a": dict(good, greedy_with_skill_fast=False), "b": good, "c": tasks["c"]})["go"]


# ----------------------------------------------------------------------------- roles and results
def test_role_checks_apply_the_margin_rule():
    from coevo import roles as RC

    p = P.protocol(tiny=True)
    (rl,), (held,) = p["rl_tasks"], p["heldout_tasks"]

    def table(fast, medium, wrong_ok=False):
        out = []
        for t in (rl, held):
            out += [{"task": t, "variant": "s", "role": "slow", "correct": True, "speedup": 0.5},
                    {"task": t, "variant": "m", "role": "medium", "correct": True, "speedup": medium},
                    {"task": t, "variant": "f", "role": "fast", "correct": True, "speedup": fast},
                    {"task": t, "variant": "w", "role": "wrong", "correct": wrong_ok, "speedup": None}]
        return out

    assert all(c["ok"] for c in RC.role_checks(p, table(1.56, 0.923)))
    assert RC.role_checks(p, table(1.55, 0.9))[0]["problems"] == ["fast f 1.55x < 1.56x"]
    assert RC.role_checks(p, table(2.0, 0.93))[0]["problems"] == ["medium m 0.93x > 0.923x"]
    assert RC.role_checks(p, table(2.0, 0.5, wrong_ok=True))[0]["problems"] == ["wrong w judged correct"]
    assert RC.card_kind("NVIDIA H100 80GB HBM3") == "h100" and RC.card_kind("NVIDIA H200") == "h200"


def _main(capsys, *args) -> tuple[int, str]:
    """The command in this process (faster than a subprocess): (exit code, stderr)."""
    import coevolution

    try:
        coevolution.main([str(a) for a in args])
        code = 0
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def _fake_prepared(d: Path, capsys) -> None:
    assert _main(capsys, "plan", "--dir", d)[0] == 0
    (d / "sft" / "model").mkdir(parents=True)


def test_a_failing_role_record_stops_probe_and_arm_in_one_line_with_nothing_started(tmp_path, capsys):
    from coevo import roles as RC

    _fake_prepared(tmp_path, capsys)
    rec = {"card": "cpu", "gpu": "cpu", "date": "2026-12-06T04:00:00+00:00", "ok": False, "verdicts": [],
           "checks": [{"task": "level2/1_Linear_Bias_GELU", "ok": False, "speedups": {},
                       "problems": ["fast fused_tile128 1.40x < 1.56x"]}]}
    path = RC.record_path(tmp_path, "cpu")
    path.parent.mkdir()
    path.write_text(json.dumps(rec))
    (tmp_path / "probes.jsonl").write_text(json.dumps({"date": "2026-12-06", "card": "cpu", "go": True}) + "\n")
    before = sorted(x.relative_to(tmp_path) for x in tmp_path.rglob("*"))
    assert not (tmp_path / "rows").exists() and not (tmp_path / "work").exists()
    for args in (["arm", "--arm", "full", "--seed", "0"], ["probe"]):
        code, err = _main(capsys, *args, "--dir", tmp_path)
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert "the variant roles fail on this cpu" in err and "1.40x < 1.56x" in err, err
        assert "nothing was started" in err
    after = sorted(x.relative_to(tmp_path) for x in tmp_path.rglob("*"))
    assert after == before  # no rows, no work folder, no probe record


def test_an_arm_starts_only_after_a_probe_that_said_go(tmp_path, capsys):
    _fake_prepared(tmp_path, capsys)
    code, err = _main(capsys, "arm", "--arm", "frozen", "--seed", "1", "--dir", tmp_path)
    assert code == 2 and "no probe in" in err and "run the probe command first" in err
    probes = [{"date": "2026-12-05", "card": "h200", "go": True}, {"date": "2026-12-06", "card": "h100", "go": False}]
    (tmp_path / "probes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in probes))
    code, err = _main(capsys, "arm", "--arm", "frozen", "--seed", "1", "--dir", tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "the last probe (2026-12-06, h100) said no-go" in err and "sftdata.py" in err
    assert not (tmp_path / "rows").exists() and not (tmp_path / "work").exists()


def test_prepare_stops_before_any_sft_when_the_roles_fail_and_a_days_record_is_reused(tmp_path):
    """`prepare` with a judge (a stand-in inside this test) under which one held-out task's
    fast variant reaches 1.5x: the role record says so, RoleCheckFailed names it in one line,
    and no SFT data, base or SFT model exist. `ensure` makes a record once per card and
    day and reuses it after."""
    from coevo import catalog as C
    from coevo import prepare as PR
    from coevo import roles as RC

    p = P.protocol()
    cat = C.catalogue(p)
    role = {(t, kv.normalized(k["source"])): k["role"] for t, ks in cat.items() for k in ks}
    speed = {"slow": 0.4, "medium": 0.8, "fast": 2.0, "lacking": 0.8, "with": 2.0, "practice": 1.0}

    class Judge:
        def evaluate_many(self, items, progress=None):
            out = []
            for i, (task, src) in enumerate(items):
                r = role[(task.name, kv.normalized(src))]
                sp = 1.5 if (task.name, r) == ("level2/12_Linear_Bias_SiLU", "fast") else speed.get(r)
                res = EvalResult(task=task.name, compiled=True, correct=r != "wrong", trials=5, speedup=sp)
                out.append(res)
                if progress is not None:
                    progress(i, res)
            return out

    with pytest.raises(RC.RoleCheckFailed) as e:
        PR.prepare(p, tmp_path, Judge(), echo=lambda *a: None)
    msg = str(e.value)
    assert "\n" not in msg and "level2/12_Linear_Bias_SiLU: fast fast 1.50x < 1.56x" in msg
    assert not any((tmp_path / x).exists() for x in ("sft.jsonl", "sft", "base"))
    (rec,) = [json.loads(f.read_text()) for f in (tmp_path / "roles").glob("*.json")]
    assert not rec["ok"] and sum(not c["ok"] for c in rec["checks"]) == 1
    calls = []

    def judged():
        calls.append(1)
        return cat, {(t, k["name"]): {"correct": k["role"] != "wrong", "speedup": speed.get(k["role"])}
                     for t in list(p["rl_tasks"]) + list(p["heldout_tasks"]) for k in cat[t]}

    other = tmp_path / "other"
    got = RC.ensure(p, other, judged, echo=lambda *a: None)
    again = RC.ensure(p, other, judged, echo=lambda *a: None)
    assert got["ok"] and again == got and calls == [1] and len(got["verdicts"]) == 30


def test_a_run_folder_of_another_protocol_version_is_refused_naming_it(tmp_path, capsys):
    _fake_prepared(tmp_path, capsys)
    plan = json.loads((tmp_path / "run.json").read_text())
    plan["protocol"]["version"] = 1
    (tmp_path / "run.json").write_text(json.dumps(plan))
    for args in (["plan"], ["arm", "--arm", "full", "--seed", "0"], ["probe"]):
        code, err = _main(capsys, *args, "--dir", tmp_path)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "made under protocol version 1 (this is version 2)" in err
    plan["protocol"]["version"] = 2
    plan["protocol"]["steps"] = 99
    (tmp_path / "run.json").write_text(json.dumps(plan))
    code, err = _main(capsys, "probe", "--dir", tmp_path)
    assert code == 2 and "the protocol's 'steps' differs" in err


def test_a_rows_file_of_another_protocol_version_is_refused(real, tmp_path):
    from coevo.runner import ArmRun, RunError, rows_path

    p, cat, _ = real
    path = rows_path(tmp_path, "full", 0)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"arm": "full", "seed": 0, "status": "done", "steps": []}))  # v1 wrote no version
    with pytest.raises(RunError, match="written under protocol version 1 \\(this is version 2\\)"):
        ArmRun(p, tmp_path, "full", 0, None, cat).run()


def test_collect_names_the_file_after_the_cards_and_draws_a_png_per_arm_and_seed(tmp_path, capsys):
    _fake_prepared(tmp_path, capsys)
    for arm, seed, gpu in (("full", 0, "NVIDIA H100 80GB HBM3"), ("frozen", 0, "NVIDIA H200")):
        steps = [{"arm": arm, "seed": seed, "step": s, "admitted": int(s == 1), "library_size": 1,
                  "admitted_share_of_schemes": 0.5, "turn1_fast_1.2": 0.2,
                  **({"heldout_turn1_fast_1.2": 0.25} if s == 2 else {})} for s in (1, 2)]
        doc = {"arm": arm, "seed": seed, "gpu": gpu, "date": "2026-12-06", "status": "done", "steps": steps,
               "final": _final([1, 1], [0, 0]), "protocol_version": 2}
        (tmp_path / "rows").mkdir(exist_ok=True)
        (tmp_path / "rows" / f"{arm}-s{seed}.json").write_text(json.dumps(doc))
    (tmp_path / "probes.jsonl").write_text(json.dumps({"date": "d", "card": "h100", "summary_share": 0.5,
                                                      "greedy_with_skill_fast_share": 1.0,
                                                      "noskill_fast_share": 0.0, "go": True}) + "\n")
    doc = R.collect(tmp_path)
    assert doc["card"] == "h100_h200" and {r["gpu"] for r in doc["rows"]} == {"NVIDIA H100 80GB HBM3", "NVIDIA H200"}
    assert doc["protocol"]["version"] == 2 and isinstance(doc["protocol"]["heldout_tasks"], dict)
    assert [t["name"] for t in doc["tests"]] == sorted(P.PROTOCOL["tests"]) and len(doc["probes"]) == 1
    assert all({"arm", "seed", "step", "admitted"} <= set(r) for r in doc["rows"])
    pngs = R.write(doc, tmp_path / "out" / "coevolution_h100_h200.json")
    assert sorted(x.name for x in pngs) == ["coevolution_h100_h200_frozen-s0.png", "coevolution_h100_h200_full-s0.png"]
    assert all(x.read_bytes()[:4] == b"\x89PNG" for x in pngs)
    page = tmp_path / "page.md"
    page.write_text(f"# x\n{R.BEGIN}\nNo arm has run.\n{R.END}\ntail\n")
    assert R.fill_docs(doc, "coevolution_h100_h200.json", page)
    text = page.read_text()
    assert "No arm has run." not in text and "| b_transfer | pass |" in text and text.endswith("tail\n")
    assert "| d_full_vs_frozen | fail" in text


def test_collect_keeps_the_probes_of_earlier_run_folders_of_the_card():
    new = {"card": "h100", "probes": [{"date": "2026-12-07", "card": "h100", "go": True}]}
    old = {"card": "h100", "probes": [{"date": "2026-12-06", "card": "h100", "go": False},
                                      {"date": "2026-12-07", "card": "h100", "go": True}]}
    got = R.with_earlier_probes(new, old)
    assert [x["date"] for x in got["probes"]] == ["2026-12-06", "2026-12-07"]
    assert R.with_earlier_probes(new, dict(old, card="h200")) == new and R.with_earlier_probes(new, None) == new


def test_the_docs_page_has_the_verdict_markers():
    text = (ROOT / "docs" / "coevolution.md").read_text()
    assert R.BEGIN in text and R.END in text and "(a)" in text and "(e)" in text


# ----------------------------------------------------------------------------- command line
def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args, words in ((["arm", "--dir", tmp_path, "--arm", "full"], "needs --arm and --seed"),
                        (["arm", "--dir", tmp_path, "--arm", "no_joint_training", "--seed", "2"],
                         "one of the protocol's seeds for no_joint_training"),
                        (["arm", "--dir", tmp_path, "--arm", "full", "--seed", "0"], "run the prepare command first"),
                        (["probe", "--dir", tmp_path], "run the prepare command first"),
                        (["check"], "needs the result JSON"), (["check", tmp_path / "none.json"], "no result JSON"),
                        (["collect", "--dir", tmp_path], "no run.json")):
        r = _run(*args)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_tiny_smoke_end_to_end_on_cpu_and_reruns_keep_what_is_saved(tmp_path):
    """`all --tiny`: kernels judged on the CPU evaluator, SFT data and a tiny model, the
    probe, the four arms' RL steps on the real pipeline from a distractor library, the
    held-out evaluation, the result JSON with the five tests, and a PNG per arm. Then: a
    rerun of a finished arm leaves its rows as they are; an unfinished one whose row waits
    for its sealed checkpoint resumes from it (no step counted twice); one without a
    checkpoint is refused unless --restart."""
    import time

    run, out = tmp_path / "run", tmp_path / "res" / "coevolution_tiny.json"
    t0 = time.monotonic()
    r = _run("all", "--tiny", "--dir", run, "--out", out, timeout=600)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    assert took < 300, took  # 1.5 to 3 minutes on 2 shared cores; this only catches a run of the real sizes
    doc = json.loads(out.read_text())
    assert {"card", "protocol", "rows", "runs", "probes", "tests"} <= set(doc)
    assert doc["protocol"]["name"] == "coevolution-tiny" and doc["protocol"]["version"] == 2
    assert len(doc["rows"]) == 4 and len(doc["probes"]) == 1 and len(doc["tests"]) == 5
    for row in doc["rows"]:
        assert {"arm", "seed", "step", "library_size", "distractors", "admitted", "turn1_fast_1.2",
                "admitted_share_of_schemes", "distractor_share_of_schemes", "funnel", "admissions",
                "heldout_turn1_fast_1.2", "gpu"} <= set(row)
        assert row["turn1_samples"] == 3 * 2 and row["distractors"] == len(_distractors())
    for run_ in doc["runs"]:
        assert run_["status"] == "done" and run_["final"]["on"]["samples"] == 2
    full = next(x for x in doc["runs"] if x["arm"] == "full")
    assert full["final"]["off"]["samples"] == 2
    assert len(list(out.parent.glob("coevolution_tiny_*-s0.png"))) == 4
    assert {"go", "summary_share", "card"} <= set(doc["probes"][0])
    sft = [json.loads(line) for line in (run / "sft.jsonl").read_text().splitlines()]
    p = P.protocol(tiny=True)
    from coevo import catalog as C

    assert sft and S.violations(sft, p, C.catalogue(p)) == []

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


def _distractors():
    from coevo import catalog as C

    return C.distractors()


@pytest.mark.slow
def test_ctrl_c_is_one_line_exit_130_and_leaves_whole_files(tmp_path):
    """SIGINT while `prepare` judges the kernels: one line, exit 130, and every verdict line
    already written whole (a rerun continues from them)."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, str(SCRIPT), "prepare", "--tiny", "--dir", str(tmp_path)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
    verdicts = tmp_path / "verdicts.jsonl"
    deadline = time.time() + 600  # a fresh clone's first verdict waits for a cold evaluator under a loaded suite
    while not (verdicts.is_file() and verdicts.read_text().strip()) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None and verdicts.is_file(), "prepare ended, or wrote no verdict in time, before the signal"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted during prepare" in err and "Traceback" not in err, err[-2000:]
    lines = verdicts.read_text().splitlines()
    assert lines and all(json.loads(line)["result"] for line in lines)
    assert not (tmp_path / "sft" / "model").exists()
