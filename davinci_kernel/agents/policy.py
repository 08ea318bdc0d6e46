"""The Policy agent: prompts for writing ``ModelNew``, feedback turns, and code extraction.

Covers: the system prompt (kernel language rules, Triton by default or CUDA through
``load_inline``; the full content of the selected skills), the first user message with the
task, the feedback message of each later turn (from ``EvalResult.feedback``, or from the
parser's error when the reply held no usable code), and ``extract_code`` which finds the
candidate file in a reply. Does not cover: running or judging the code (``evaluate``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from ..records import EvalResult, Skill, Task
from .extract import code_blocks, defines, strip_think, unfenced_python
from .templates import render

LANGUAGES = {"triton": "Triton", "cuda": "CUDA"}
_PY = ("", "python", "py", "python3")


@dataclass
class ParsedCode:
    code: Optional[str]
    error: Optional[str] = None
    note: Optional[str] = None  # what the parser had to work around


def skill_block(skill: Skill) -> str:
    """One skill under its own heading; its sections become sub-headings of it."""
    tags = ", ".join(skill.tags)
    body = re.sub(r"^## ", "#### ", skill.content.strip(), flags=re.M)
    return f"### {skill.name} [{skill.scope}] ({tags})\n{skill.description}\n\n{body}\n"


def system_prompt(skills: Sequence[Skill] = (), language: str = "triton") -> str:
    section = "\n" + render("policy_skills", skills="\n".join(skill_block(s) for s in skills)) if skills else ""
    return render("policy_system", language_rules=render(f"policy_language_{language}").strip(),
                  skills_section=section)


def first_messages(task: Task, skills: Sequence[Skill] = (), language: str = "triton") -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": system_prompt(skills, language)},
        {"role": "user", "content": render("policy_user", task_name=task.name, task_source=task.source.strip(),
                                           language_name=LANGUAGES[language])},
    ]


def feedback_message(turn: int, turns: int, result: Optional[EvalResult] = None,
                     parse_error: Optional[str] = None, truncated: bool = False) -> dict[str, Any]:
    """The user message after 1-based ``turn``: what happened, then what to do next."""
    if parse_error or result is None:
        text = f"Format error: {parse_error or 'no code found'}."
        instruction = ("Reply with one ```python code block that holds the complete file: imports, "
                       "kernels and `class ModelNew`.")
    else:
        text = result.feedback.strip() or _fallback_feedback(result)
        if result.correct:
            instruction = ("The kernel is correct. Make it faster while keeping it correct; reply with the "
                           "complete improved file.")
        else:
            instruction = "Fix the problem above and reply with the complete corrected file."
    if truncated:
        text = ("Your reply reached the generation limit and was cut off; keep the reasoning short "
                "and the file compact.\n\n" + text)
    return {"role": "user", "content": render("policy_feedback", turn=turn, turns=turns, feedback=text,
                                              instruction=instruction)}


def _fallback_feedback(r: EvalResult) -> str:
    if not r.compiled:
        return f"Compilation failed ({r.error_kind or r.stage}): {r.error_msg or 'no message'}"
    if not r.correct:
        return f"Incorrect ({r.error_kind or r.stage}): {r.error_msg or ''} max abs diff {r.max_abs_diff}"
    return f"Correct. Speedup: {r.speedup if r.speedup is not None else 'not timed on this device'}"


def extract_code(reply: str, class_name: str = "ModelNew") -> ParsedCode:
    """The candidate file in a reply: the code block that defines ``ModelNew`` (the last
    one when several do), joined with earlier blocks when it relies on them; an unfenced
    file when there are no fences."""
    text, unclosed = strip_think(reply)
    if unclosed:
        return ParsedCode(None, "the reply ended inside <think> before any code; think less and answer "
                                "with the code")
    blocks = [body for lang, body in code_blocks(text) if lang in _PY]
    with_cls = [i for i, b in enumerate(blocks) if defines(b, class_name)]
    if with_cls:
        i = with_cls[-1]
        code = blocks[i]
        note = None
        if "import" not in code and i > 0:  # kernels and imports were given in earlier blocks
            earlier = [b for b in blocks[:i] if not defines(b, class_name)]
            code = "\n\n".join(earlier + [code])
            note = f"joined {len(earlier) + 1} code blocks"
        elif len(blocks) > 1:
            note = f"took block {i + 1} of {len(blocks)}"
        return ParsedCode(code.strip() + "\n", note=note)
    if blocks:
        return ParsedCode(None, f"none of the {len(blocks)} code block(s) defines `class {class_name}`")
    loose = unfenced_python(text)
    if loose and defines(loose, class_name):
        return ParsedCode(loose, note="code had no fences")
    if class_name in text:
        return ParsedCode(None, f"`class {class_name}` appears but not as parseable Python; put the file in one "
                                "```python block")
    return ParsedCode(None, "the reply has no code block")
