"""The agents' parsers on what models really send, and the prompts they build."""

import json

import pytest

from davinci_kernel.agents import (
    extract_code,
    feedback_message,
    first_messages,
    parse_selection,
    parse_summary,
    selection_messages,
    summary_messages,
)
from davinci_kernel.agents.templates import PROMPT_DIR, render
from davinci_kernel.records import EvalResult, Skill, Task

TASK = Task(name="level1/19_ReLU", level=1, problem_id=19, source="import torch\nclass Model: pass\n")
MODEL_NEW = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
SKILLS = [Skill(name="vectorized_loads", description="Use wide loads", tags=["memory"],
                content="## Motivation\nmemory bound\n## Key Idea\nwide\n## Example\n```python\npass\n```"),
          Skill(name="fuse_epilogue", description="Fuse elementwise ops", scope="task_specific/fusion")]


# ------------------------------------------------------------------ policy code
@pytest.mark.parametrize("reply,expect_note", [
    (f"Here it is:\n```python\n{MODEL_NEW}```\nDone.", None),
    (f"<think>try ```python\nclass ModelNew: pass\n``` hmm</think>\n```python\n{MODEL_NEW}```", None),
    (f"```python\nimport torch\nx = 1\n```\nthen\n```py\n{MODEL_NEW}```", "took block 2 of 2"),
    (f"First draft:\n```python\n{MODEL_NEW}```\nBetter:\n```python\n{MODEL_NEW.replace('return x', 'return x * 1')}```",
     "took block 2 of 2"),
    (f"Sure. The code:\n\n{MODEL_NEW}\nThis should be fast.", "code had no fences"),
    (f"```python\n{MODEL_NEW}", None),  # cut off before the closing fence
    ("```python\nimport torch\nimport triton\n\ndef helper():\n    return 1\n```\n"
     "```python\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return helper()\n```",
     "joined 2 code blocks"),
])
def test_extract_code_variants(reply, expect_note):
    p = extract_code(reply)
    assert p.error is None and p.code and "class ModelNew" in p.code
    assert p.note == expect_note
    if "x * 1" in reply:
        assert "x * 1" in p.code  # the last definition wins
    if "helper" in reply:
        assert "def helper" in p.code and "class ModelNew" in p.code


@pytest.mark.parametrize("reply,fragment", [
    ("I cannot do that.", "no code block"),
    ("```python\nimport torch\n```", "defines `class ModelNew`"),
    ("<think>long thinking that never ends", "inside <think>"),
    ("", "no code block"),
    ("class ModelNew is the answer but (", "not as parseable Python"),
])
def test_extract_code_errors_say_what_was_wrong(reply, fragment):
    p = extract_code(reply)
    assert p.code is None and fragment in p.error


def test_policy_prompts_inject_skills_and_language():
    msgs = first_messages(TASK, SKILLS[:1], "triton")
    assert msgs[0]["role"] == "system" and "vectorized_loads" in msgs[0]["content"]
    assert "## Key Idea" in msgs[0]["content"] and "@triton.jit" in msgs[0]["content"]
    assert "class Model: pass" in msgs[1]["content"]
    assert "Skills from the library" not in first_messages(TASK, [], "triton")[0]["content"]
    assert "load_inline" in first_messages(TASK, [], "cuda")[0]["content"]


def test_feedback_messages():
    r = EvalResult(compiled=True, correct=False, feedback="Output mismatch: max abs diff 3.1")
    m = feedback_message(1, 3, result=r)
    assert m["role"] == "user" and "max abs diff 3.1" in m["content"] and "turn 1 of 3" in m["content"]
    assert "Format error: the reply has no code block" in feedback_message(2, 3, parse_error="the reply has no code block")["content"]
    cut = feedback_message(1, 3, parse_error="the reply has no code block", truncated=True)["content"]
    assert "generation limit" in cut and "Format error" in cut
    ok = feedback_message(1, 3, result=EvalResult(compiled=True, correct=True, feedback="Correct, 1.3x"))
    assert "faster" in ok["content"]


# ------------------------------------------------------------------ selection
def _sel(names):
    return {"name": "select_skills", "arguments": {"think": "t", "selected_skills": [{"name": n, "reason": "r"} for n in names]}}


@pytest.mark.parametrize("reply", [
    f"<tool_call>\n{json.dumps(_sel(['vectorized_loads']))}\n</tool_call>",
    f"<think>which one? {{not json}}</think>\n```json\n{json.dumps(_sel(['vectorized_loads']))}\n```",
    f"I choose: {json.dumps(_sel(['vectorized_loads', 'unknown_skill']))}",
])
def test_selection_parser(reply):
    p = parse_selection(reply, SKILLS, max_selected=3)
    assert p.error is None and p.names == ["vectorized_loads"]


def test_selection_errors_and_limit():
    assert "no select_skills" in parse_selection("no idea", SKILLS).error
    assert "inside <think>" in parse_selection("<think>hmm", SKILLS).error
    assert parse_selection(json.dumps(_sel(["fuse_epilogue", "vectorized_loads"])), SKILLS, 1).names == ["fuse_epilogue"]
    msgs = selection_messages(TASK, SKILLS, 3)
    assert "1. vectorized_loads [general] (memory): Use wide loads" in msgs[1]["content"]
    assert "## Key Idea" not in msgs[1]["content"]  # metadata only, never content


# ------------------------------------------------------------------ summary
NEW = {"name": "Block Tiling", "description": "Tile the K loop", "scope": "task_specific/matmul",
       "tags": ["matmul", "tiling"], "content": "## Motivation\nm\n## Key Idea\nk\n## Example\ne"}


@pytest.mark.parametrize("reply", [
    "<tool_call>" + json.dumps({"name": "update_skill_library", "arguments": {"think": "t", "new_skills": [NEW]}}) + "</tool_call>",
    "<think>x</think>" + json.dumps({"function": {"name": "update_skill_library",
                                                  "arguments": json.dumps({"think": "t", "new_skills": [NEW]})}}),
    f"update_skill_library(think='t', new_skills=[{NEW!r}])",
    "```json\n" + json.dumps({"think": "t", "new_skills": NEW}) + "\n```",
])
def test_summary_parser_shapes(reply):
    p = parse_summary(reply, 2)
    assert p.error is None and [s.name for s in p.skills] == ["block_tiling"]
    assert p.skills[0].scope == "task_specific/matmul" and p.skills[0].tags == ["matmul", "tiling"]


def test_summary_limits_and_problems():
    many = [dict(NEW, name=f"s{i}") for i in range(3)] + [{"name": "bad"}, dict(NEW, name="odd", scope="weird")]
    p = parse_summary(json.dumps({"name": "update_skill_library", "arguments": {"new_skills": many}}), 2)
    assert [s.name for s in p.skills] == ["s0", "s1"]
    assert any("over the limit" in x for x in p.problems) and any("bad: empty" in x for x in p.problems)
    assert "no update_skill_library" in parse_summary("nothing useful", 2).error
    msgs = summary_messages(TASK, "code1", 1.1, "code2", 1.6, 2, SKILLS[:1], ["a", "b"], 2)
    assert "1.10x" in msgs[1]["content"] and "1.60x" in msgs[1]["content"] and "a, b" in msgs[1]["content"]


def test_every_template_renders_without_leftover_slots():
    for f in PROMPT_DIR.glob("*.md"):
        import re

        slots = set(re.findall(r"\{\{(\w+)\}\}", f.read_text()))
        assert "{{" not in render(f.stem, **{s: "v" for s in slots})
