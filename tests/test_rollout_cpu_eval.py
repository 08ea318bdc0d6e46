"""A training task group through the real CPU evaluator (Triton interpreter), scripted model.

Rollout 0 writes a correct Triton ReLU; rollout 1 writes one that fails at run time and
gets the evaluator's feedback in its next turn.
"""

import pytest
from conftest import RELU, relu_kernel

from davinci_kernel.config import Config
from davinci_kernel.llm.scripted import ScriptedBackend
from davinci_kernel.records import Skill, Task
from davinci_kernel.rollout import collect_groups, validate_tasks
from davinci_kernel.skills.admit import Admission
from davinci_kernel.skills.store import SkillStore

TASK = Task(name="level1/19_ReLU", level=1, problem_id=19, source=RELU)

GOOD = relu_kernel(block=256)
WRONG = relu_kernel("x * 2.0", block=256)


def respond(req):
    system = req.messages[0]["content"]
    if "You pick optimization skills" in system:
        return '{"name": "select_skills", "arguments": {"selected_skills": [{"name": "mask_tails", "reason": "r"}]}}'
    first = sum(1 for m in req.messages if m["role"] == "user") == 1
    if first:
        respond.n += 1
        return f"```python\n{GOOD if respond.n % 2 else WRONG}```"
    if "incorrect" in req.messages[-1]["content"].lower():
        return f"Fixed:\n```python\n{GOOD}```"
    return f"Same again.\n```python\n{GOOD}```"


respond.n = 0


@pytest.fixture
def evaluator(cpu_evaluator):
    """The session's CPU evaluator (conftest): these tests need a real one, not a fresh one."""
    return cpu_evaluator


def test_training_group_with_real_cpu_evaluator(evaluator, tmp_path):
    cfg = Config()
    cfg.rollout.k_schemes, cfg.rollout.n_rollouts, cfg.rollout.turns, cfg.rollout.s_summaries = 1, 2, 2, 2
    store = SkillStore(tmp_path / "lib.db")
    store.add(Skill(name="mask_tails", description="Mask the tail of elementwise relu loads", tags=["relu"],
                    content="## Motivation\nrelu\n## Key Idea\nmask\n## Example\n```python\nm = offs < n\n```\n"), step=0)
    respond.n = 0
    [g] = collect_groups([TASK], backend=ScriptedBackend(respond), store=store, evaluator=evaluator,
                         admission=Admission(), cfg=cfg, step=1)
    assert g.schemes == [["mask_tails"], []] and len(g.episodes) == 4
    firsts = [ep.turns[0].result for ep in g.episodes]
    assert sorted(r.correct for r in firsts) == [False, False, True, True], [
        (r.correct, r.stage, r.error_kind, (r.error_msg or "")[:300], r.flags) for r in firsts]
    wrong = next(ep for ep in g.episodes if not ep.turns[0].result.correct)
    assert wrong.turns[0].result.compiled and wrong.turns[0].reward == 0.0
    assert wrong.turns[0].result.feedback.strip() in wrong.turns[1].messages[-1]["content"]
    assert wrong.turns[1].result.correct and wrong.turns[1].reward > 0
    assert all(r.speedup is None for r in firsts)  # CPU: correctness only
    assert g.summaries == [] and g.step == 1  # no timing, no trigger
    store.close()


def test_validate_tasks_returns_best_turn_per_task(evaluator):
    cfg = Config()
    cfg.rollout.turns = 2
    respond.n = 1  # first reply of the single rollout is the wrong kernel
    [res] = validate_tasks([TASK], backend=ScriptedBackend(respond), store=None, evaluator=evaluator, cfg=cfg)
    assert res.task == TASK.name and res.level == 1 and res.correct
