"""Selection on the seed library: BM25 candidates and their numbered metadata, robust
parsing of select_skills (``agents.selection``), the rerank's top k (the prompt, a short pick
completed in BM25 order, ``skills.allow_empty_pick``) and the modes of ``rollout.selection``."""

import asyncio
import json
import re

import pytest

from davinci_kernel.agents.selection import parse_selection, selection_messages
from davinci_kernel.config import SkillsConfig
from davinci_kernel.llm.scripted import ScriptedBackend
from davinci_kernel.records import Task
from davinci_kernel.rollout.context import Context
from davinci_kernel.rollout.selection import select_schemes
from davinci_kernel.skills.select import candidates_for, complete_pick, format_candidates, pick_size
from davinci_kernel.skills.store import open_store

SOFTMAX = '''import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)
def get_inputs():
    return [torch.randn(16, 16384)]
def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return open_store(SkillsConfig(db=str(tmp_path_factory.mktemp("sel") / "lib.db")))


@pytest.fixture
def task():
    return Task(name="level1/23_Softmax", level=1, problem_id=23, source=SOFTMAX)


def test_candidates_and_format(store, task):
    cfg = SkillsConfig(bm25_top_k=5)
    cands = candidates_for(task, store, cfg)
    assert len(cands) == 5 and cands[0].name in ("online_softmax", "row_softmax_single_block")
    text = format_candidates(cands)
    lines = text.splitlines()
    assert len(lines) == 5 and lines[0].startswith("1. ") and cands[0].name in lines[0]
    assert "## Key Idea" not in text  # metadata only


def _names(reply, cands, max_selected=3):
    p = parse_selection(reply, cands, max_selected)
    return p.names, p.error


def test_parse_variants(store, task):
    cands = candidates_for(task, store, SkillsConfig())
    a, b, c, d = (s.name for s in cands[:4])
    args = {"think": "t", "selected_skills": [{"name": a, "reason": "r"}, {"name": "made_up"}, {"name": b}]}
    assert _names({"name": "select_skills", "arguments": args}, cands) == ([a, b], None)
    openai_style = [{"type": "function", "function": {"name": "select_skills", "arguments": json.dumps(args)}}]
    assert _names(openai_style, cands)[0] == [a, b]
    text = f"I think so.\n```json\n{json.dumps({'name': 'select_skills', 'arguments': args})}\n```"
    assert _names(text, cands)[0] == [a, b]
    qwen = f"<tool_call>\n{json.dumps({'name': 'select_skills', 'arguments': args})}\n</tool_call>"
    assert _names(qwen, cands)[0] == [a, b]
    many = {"selected_skills": [{"name": n} for n in (a, a, b, c, d)]}
    assert _names(json.dumps(many), cands, max_selected=3)[0] == [a, b, c]
    assert _names({"selected_skills": [{"name": "2"}]}, cands)[0] == [b]
    assert _names({"selected_skills": f"{a.upper()}, {b}"}, cands)[0] == [a, b]
    assert _names({"selected_skills": []}, cands) == ([], None)
    names, err = _names("no tool call here", cands)
    assert names == [] and "select_skills" in err
    assert parse_selection({"name": "select_skills", "arguments": args}, cands).dropped == ["made_up"]


def _pick_last_two(req):
    """The selection agent played by a test double: picks the last two listed candidates."""
    listed = re.findall(r"^\d+\. (\S+)", req.messages[-1]["content"], re.M)
    return json.dumps({"name": "select_skills",
                       "arguments": {"think": "", "selected_skills": [{"name": n} for n in listed[-2:]]}})


def _schemes(store, task, mode, respond=_pick_last_two, k=2, allow_empty=False):
    ctx = Context(backend=ScriptedBackend(respond), evaluator=None,
                  skills=SkillsConfig(select_mode=mode, allow_empty_pick=allow_empty))
    return asyncio.run(select_schemes(ctx, task, store, k))


def _reply(names):
    return json.dumps({"name": "select_skills", "arguments": {"think": "", "selected_skills": [
        {"name": n} for n in names]}})


def test_modes(store, task):
    cands = candidates_for(task, store, SkillsConfig())
    top = [s.name for s in cands]
    # off (the default): 2 of the 3 asked → the best-ranked candidate not picked completes it
    schemes, turns = _schemes(store, task, "llm")
    assert len(cands) == 20 and [[s.name for s in sc] for sc in schemes] == [top[-2:] + top[:1]] * 2
    assert [t.parsed["selected"] for t in turns] == [top[-2:] + top[:1]] * 2
    assert turns[0].parsed["filled"] == top[:1] and "picked 2 of the 3 skills asked" in turns[0].parse_error
    # switch on: the pick as it is
    schemes, turns = _schemes(store, task, "llm", allow_empty=True)
    assert [[s.name for s in sc] for sc in schemes] == [top[-2:]] * 2 and turns[0].parse_error is None
    schemes, turns = _schemes(store, task, "bm25")
    assert turns == [] and [[s.name for s in sc] for sc in schemes] == [top[:3]] * 2
    assert _schemes(store, task, "none") == ([[], []], [])
    # an unreadable reply: the BM25 top 3 (off), nothing (on); the error is kept either way
    schemes, turns = _schemes(store, task, "llm", respond=lambda req: "sorry", k=1)
    assert [[s.name for s in sc] for sc in schemes] == [top[:3]] and "select_skills" in turns[0].parse_error
    assert "picked 0 of the 3" in turns[0].parse_error
    schemes, turns = _schemes(store, task, "llm", respond=lambda req: "sorry", k=1, allow_empty=True)
    assert schemes == [[]] and "select_skills" in turns[0].parse_error


def test_an_empty_or_exact_pick(store, task):
    top = [s.name for s in candidates_for(task, store, SkillsConfig())]
    # empty: completed to the BM25 top 3 (off), or kept empty (on)
    schemes, turns = _schemes(store, task, "llm", respond=lambda req: _reply([]), k=1)
    assert [s.name for s in schemes[0]] == top[:3] and turns[0].parsed["filled"] == top[:3]
    assert _schemes(store, task, "llm", respond=lambda req: _reply([]), k=1, allow_empty=True)[0] == [[]]
    # exactly the top 3, in the agent's order: nothing added, no error
    schemes, turns = _schemes(store, task, "llm", respond=lambda req: _reply([top[5], top[1], top[9]]), k=1)
    assert [s.name for s in schemes[0]] == [top[5], top[1], top[9]]
    assert turns[0].parsed["filled"] == [] and turns[0].parse_error is None


def test_complete_pick_hand_computed(store, task):
    a, b, c, d = candidates_for(task, store, SkillsConfig())[:4]
    cands = [a, b, c, d]  # BM25 order
    assert [pick_size(n, 3) for n in (0, 1, 3, 20)] == [0, 1, 3, 3]
    assert complete_pick([c.name], cands, 3) == [c.name, a.name, b.name]
    assert complete_pick([], cands, 3) == [a.name, b.name, c.name]
    assert complete_pick([d.name, c.name, b.name, a.name], cands, 3) == [d.name, c.name, b.name]
    assert complete_pick([b.name], [a, b], 3) == [b.name, a.name]  # two candidates: k = 2
    assert complete_pick([], [], 3) == []


def test_the_prompt_asks_for_the_top_k(store, task):
    cands = candidates_for(task, store, SkillsConfig())
    system, user = (m["content"] for m in selection_messages(task, cands, 3))
    assert "Choose exactly 3 skills" in system and "give the top 3" in system
    assert "with exactly 3 skills from this list" in user
    assert "empty" not in system + user and "Choosing nothing" not in system
    system, user = (m["content"] for m in selection_messages(task, cands[:2], 3))  # fewer candidates than k
    assert "Choose exactly 2 skills" in system and "with exactly 2 skills from this list" in user
    assert "with exactly 1 skill from this list" in selection_messages(task, cands[:1], 3)[1]["content"]
    system, user = (m["content"] for m in selection_messages(task, cands, 3, allow_empty=True))
    assert "Choose at most 3 skills" in system and "Choosing nothing is a valid answer" in system
    assert "at most 3 of these skills (an empty list if none fits)" in user
