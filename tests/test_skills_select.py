"""Selection: candidates, numbered metadata, robust parsing of select_skills, modes."""

import json

import pytest

from davinci_kernel.config import ConfigError, SkillsConfig
from davinci_kernel.records import Task
from davinci_kernel.skills.select import candidates_for, format_candidates, parse_selection, select
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


def test_parse_variants(store, task):
    cands = candidates_for(task, store, SkillsConfig())
    a, b, c, d = (s.name for s in cands[:4])
    args = {"think": "t", "selected_skills": [{"name": a, "reason": "r"}, {"name": "made_up"}, {"name": b}]}
    assert parse_selection({"name": "select_skills", "arguments": args}, cands) == ([a, b], None)
    openai_style = [{"type": "function", "function": {"name": "select_skills", "arguments": json.dumps(args)}}]
    assert parse_selection(openai_style, cands)[0] == [a, b]
    text = f"I think so.\n```json\n{json.dumps({'name': 'select_skills', 'arguments': args})}\n```"
    assert parse_selection(text, cands)[0] == [a, b]
    qwen = f"<tool_call>\n{json.dumps({'name': 'select_skills', 'arguments': args})}\n</tool_call>"
    assert parse_selection(qwen, cands)[0] == [a, b]
    many = {"selected_skills": [{"name": n} for n in (a, a, b, c, d)]}
    assert parse_selection(json.dumps(many), cands, max_selected=3)[0] == [a, b, c]
    assert parse_selection({"selected_skills": [{"name": "2"}]}, cands)[0] == [b]
    assert parse_selection({"selected_skills": []}, cands) == ([], None)
    names, err = parse_selection("no tool call here", cands)
    assert names == [] and "select_skills" in err


def test_modes(store, task):
    seen = {}

    def rerank(prompt):  # test double: picks the last two listed candidates
        seen["prompt"] = prompt
        last = [ln.split(" ", 2)[1] for ln in prompt.splitlines()[-2:]]
        return {"name": "select_skills", "arguments": {"think": "", "selected_skills": [{"name": n} for n in last]}}

    sel = select(task, store, SkillsConfig(select_mode="llm"), rerank=rerank)
    assert len(sel.candidates) == 20 and sel.names == [s.name for s in sel.candidates[-2:]]
    assert seen["prompt"].startswith("1. ")
    sel = select(task, store, SkillsConfig(select_mode="bm25"))
    assert sel.names == [s.name for s in sel.candidates[:3]]
    assert select(task, store, SkillsConfig(select_mode="none")).skills == []
    bad = select(task, store, SkillsConfig(select_mode="llm"), rerank=lambda p: "sorry")
    assert bad.skills == [] and bad.error
    with pytest.raises(ConfigError):
        select(task, store, SkillsConfig(select_mode="llm"))
