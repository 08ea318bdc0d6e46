"""Selection on the seed library: BM25 candidates and their numbered metadata, robust
parsing of select_skills (``agents.selection``), and the modes of ``rollout.selection``."""

import asyncio
import json
import re

import pytest

from davinci_kernel.agents.selection import parse_selection
from davinci_kernel.config import SkillsConfig
from davinci_kernel.llm.scripted import ScriptedBackend
from davinci_kernel.records import Task
from davinci_kernel.rollout.context import Context
from davinci_kernel.rollout.selection import select_schemes
from davinci_kernel.skills.select import candidates_for, format_candidates
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


def _schemes(store, task, mode, respond=_pick_last_two, k=2):
    ctx = Context(backend=ScriptedBackend(respond), evaluator=None, skills=SkillsConfig(select_mode=mode))
    return asyncio.run(select_schemes(ctx, task, store, k))


def test_modes(store, task):
    cands = candidates_for(task, store, SkillsConfig())
    schemes, turns = _schemes(store, task, "llm")
    assert len(cands) == 20 and [[s.name for s in sc] for sc in schemes] == [[s.name for s in cands[-2:]]] * 2
    assert [t.parsed["selected"] for t in turns] == [[s.name for s in cands[-2:]]] * 2
    schemes, turns = _schemes(store, task, "bm25")
    assert turns == [] and [[s.name for s in sc] for sc in schemes] == [[s.name for s in cands[:3]]] * 2
    assert _schemes(store, task, "none") == ([[], []], [])
    schemes, turns = _schemes(store, task, "llm", respond=lambda req: "sorry", k=1)
    assert schemes == [[]] and "select_skills" in turns[0].parse_error
