"""A full task group with a scripted backbone: selection, turns, summary, verification.

The evaluator here is a test double that judges the scripted kernels by a marker comment
and reports speedups (the CPU evaluator cannot time); ``test_rollout_cpu_eval.py`` runs
the real one.
"""

import asyncio
import json

import pytest

from davinci_kernel.config import RolloutConfig, SkillsConfig
from davinci_kernel.llm.scripted import ScriptedBackend
from davinci_kernel.records import EvalResult, Skill, Task, TaskGroup
from davinci_kernel.rollout.context import Context
from davinci_kernel.rollout.group import GroupPlan, run_group
from davinci_kernel.skills.admit import Admission
from davinci_kernel.skills.store import SkillStore

TASK = Task(name="level1/19_ReLU", level=1, problem_id=19,
            source="import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n")

KERNEL = """import torch
import triton
import triton.language as tl

# variant: {variant}
@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), {block}),)](x, y, x.numel(), BLOCK={block})
        return y
"""

NEW_SKILL = {"name": "wide_blocks_for_elementwise", "description": "Use large blocks for elementwise kernels",
             "scope": "task_specific/elementwise", "tags": ["elementwise", "block size"],
             "content": "## Motivation\nMemory-bound elementwise ops with many elements.\n"
                        "## Key Idea\nLarger BLOCK means fewer programs and better bandwidth use.\n"
                        "## Example\n```python\n@triton.jit\ndef k(x_ptr, n, BLOCK: tl.constexpr):\n"
                        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n```\n"}


def respond(req):
    system = req.messages[0]["content"]
    if "You pick optimization skills" in system:
        return '<tool_call>{"name": "select_skills", "arguments": {"think": "relu is memory bound", ' \
               '"selected_skills": [{"name": "mask_tails", "reason": "edges"}]}}</tool_call>'
    if "You curate a library" in system:
        return "<think>bigger blocks</think>\n<tool_call>" + json.dumps(
            {"name": "update_skill_library", "arguments": {"think": "block size", "new_skills": [NEW_SKILL]}}) + "</tool_call>"
    if NEW_SKILL["name"] in system:  # verification with the new skill
        return f"```python\n{KERNEL.format(variant='fast', block=4096)}```"
    turn = sum(1 for m in req.messages if m["role"] == "user")
    if turn == 1:
        return f"Start simple.\n```python\n{KERNEL.format(variant='slow', block=256)}```"
    if turn == 2:
        assert "Correct at 1.00x" in req.messages[-1]["content"]
        return "I will now think about it but give no code."
    assert "Format error" in req.messages[-1]["content"]
    return f"```python\n{KERNEL.format(variant='fast', block=4096)}```"


class FakeEvaluator:
    def __init__(self):
        self.calls = 0

    def evaluate_many(self, items, progress=None):
        out = []
        for task, code in items:
            self.calls += 1
            fast = "variant: fast" in code
            s = 1.5 if fast else 1.0
            out.append(EvalResult(task=task.name, level=task.level, compiled=True, correct=True, stage="done",
                                  trials=5, trials_passed=5, speedup=s, coverage=1.0, timing_available=True,
                                  feedback=f"Correct at {s:.2f}x"))
        return out


@pytest.fixture
def store(tmp_path):
    s = SkillStore(tmp_path / "lib.db")
    s.add(Skill(name="mask_tails", description="Mask loads at the tail", tags=["elementwise", "relu"],
                content="## Motivation\nany elementwise relu\n## Key Idea\nmask\n## Example\n```python\nmask = offs < n\n```\n"),
          step=0)
    yield s
    s.close()


def test_full_group_with_summary_and_admission(store, tmp_path):
    ev = FakeEvaluator()
    ctx = Context(backend=ScriptedBackend(respond), evaluator=ev,
                  rollout=RolloutConfig(k_schemes=2, n_rollouts=2, turns=3, s_summaries=3, max_new_tokens=512),
                  skills=SkillsConfig(db=str(tmp_path / "lib.db")))
    adm = Admission()
    g = asyncio.run(run_group(ctx, TASK, GroupPlan(k_schemes=2, n_rollouts=2, turns=3, record_usage=True), store=store, admission=adm))

    assert g.schemes == [["mask_tails"], ["mask_tails"], []]  # k samples + null scheme
    assert len(g.selections) == 2 and all(t.parse_error is None for t in g.selections)
    assert len(g.episodes) == 6 and all(len(e.turns) == 3 for e in g.episodes)
    ep = g.episodes[0]
    assert "mask_tails" in ep.turns[0].messages[0]["content"]  # skills injected into the system prompt
    assert "mask_tails" not in g.episodes[-1].turns[0].messages[0]["content"]  # null scheme
    t1, t2, t3 = ep.turns
    assert t1.result.speedup == 1.0 and t1.reward == pytest.approx(0.5 + 0.5 * 1.0 + 0.5)
    assert t2.result is None and t2.parse_error == "the reply has no code block" and t2.reward == 0.0
    assert t3.result.speedup == 1.5 and ep.best_turn == 2
    assert len(t3.messages) == 6  # system, task, reply, feedback, reply, format-error feedback
    # trigger fired: s summaries, one proposal each, verified greedily, one staged for the task
    assert len(g.summaries) == 3 and all(s.parse_error is None for s in g.summaries)
    assert all(s.reward == 1.5 for s in g.summaries)
    assert len(g.verifications) == 3 and all(v.result.speedup == 1.5 for v in g.verifications)
    assert [s.name for s in g.admitted] == [NEW_SKILL["name"]]
    assert adm.staged[TASK.name][0].verify_speedup == 1.5
    assert ev.calls == 6 * 2 + 3  # two coded turns per rollout + 3 verifications
    assert adm.commit(store, step=1)[0].name == NEW_SKILL["name"]
    # the record round-trips through JSON for the trainer and reports
    back = TaskGroup.from_dict(json.loads(json.dumps(g.to_dict())))
    assert back.episodes[0].turns[2].result.speedup == 1.5 and back.summaries[0].completion.text
    used = store.get("mask_tails")
    assert (used.times_selected, used.times_improved) == (2, 2)  # once per scheme that chose it


def test_failing_server_turns_are_recorded_and_run_goes_on():
    calls = {"n": 0}

    def flaky(req):
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("server went away")
        return f"```python\n{KERNEL.format(variant='slow', block=256)}```"

    ctx = Context(backend=ScriptedBackend(flaky), evaluator=FakeEvaluator(),
                  rollout=RolloutConfig(n_rollouts=2, turns=2))
    g = asyncio.run(run_group(ctx, TASK, GroupPlan(k_schemes=0, n_rollouts=2, turns=2, summaries=False)))
    bad = g.episodes[0].turns[0]
    assert bad.kept is False and "server went away" in bad.parse_error and bad.reward is None
    assert g.episodes[0].turns[1].result.correct  # same prompt sent again, run went on
    assert len(g.episodes[0].turns[1].messages) == 2
    assert g.summaries == []  # no trigger: speedup never improved


# the relu launcher with its kernel: a host function that computes the module's whole output
SOLVER_SKILL = dict(NEW_SKILL, name="relu_launcher", content=NEW_SKILL["content"].split("## Example")[0] + (
    "## Example\n```python\n@triton.jit\ndef relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n"
    "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
    "    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=offs < n), 0.0), mask=offs < n)\n\n\n"
    "def relu(x):\n    y = torch.empty_like(x)\n"
    "    relu_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096)\n    return y\n```\n"))


def respond_solver(req):
    system = req.messages[0]["content"]
    if "You curate a library" in system:
        return "<tool_call>" + json.dumps({"name": "update_skill_library", "arguments": {
            "think": "block size", "new_skills": [SOLVER_SKILL]}}) + "</tool_call>"
    if SOLVER_SKILL["name"] in system:  # verification with the new skill
        return f"```python\n{KERNEL.format(variant='fast', block=4096)}```"
    return respond(req)


@pytest.mark.parametrize("check", [True, False])
def test_an_example_that_solves_its_task_when_pasted_is_refused_and_the_row_says_why(store, tmp_path, check):
    """The Example's launcher computes the whole ReLU: pasted alone as the candidate (its
    function as the forward) it is judged correct in the verification's fresh batch, so the
    skill is refused (example_solves_task), though its re-generation was fast; the reason and
    its name are in the verification row. With skills.example_solve_check off, no such
    evaluation runs and the skill is staged."""
    ev = FakeEvaluator()  # judges every source correct: the pasted Example too
    ctx = Context(backend=ScriptedBackend(respond_solver), evaluator=ev,
                  rollout=RolloutConfig(k_schemes=1, n_rollouts=1, turns=3, s_summaries=1, max_new_tokens=512),
                  skills=SkillsConfig(db=str(tmp_path / "lib.db"), example_solve_check=check))
    adm = Admission()
    g = asyncio.run(run_group(ctx, TASK, GroupPlan(k_schemes=1, n_rollouts=1, turns=3), store=store, admission=adm))
    (v,) = json.loads(json.dumps(g.to_dict()))["verifications"]
    assert v["result"]["speedup"] == 1.5 and v["parsed"]["skill"] == "relu_launcher"
    if check:
        assert ev.calls == 2 * 2 + 2  # two coded turns per rollout, the re-generation and the pasted Example
        assert v["parsed"]["example_judged"] == {"correct": True, "speedup": 1.0}
        assert not v["parsed"]["staged"] and v["parsed"]["rule"] == "example_solves_task"
        assert v["parsed"]["reason"].startswith("example_solves_task: the Example pasted alone")
        assert adm.staged == {} and adm.decisions[-1].rule == "example_solves_task"
    else:
        assert ev.calls == 2 * 2 + 1 and v["parsed"]["example_judged"] is None
        assert v["parsed"]["staged"] and v["parsed"]["rule"] is None and list(adm.staged) == [TASK.name]
