"""The Skill Summary agent: its prompt and the reading of its ``update_skill_library`` call.

Covers: the chat messages (the task, the first correct and the best kernels with their
speedups, the skills used, the library's existing names) and ``parse_summary``, which
finds the tool call in any of the shapes models write, turns each proposed skill into a
``Skill`` (name normalized to snake_case, scope and tags checked, content required) and
keeps at most ``max_new_skills``. Problems with one skill drop that skill and are
reported; no usable call is an error. Does not cover: the content filter, de-duplication
or verification (``skills.admit``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from ..records import Skill, Task
from .extract import find_tool_call, strip_think
from .templates import render

TOOL_NAME = "update_skill_library"
SECTIONS = ("## Motivation", "## Key Idea", "## Example")


@dataclass
class ParsedSummary:
    skills: list[Skill] = field(default_factory=list)
    think: str = ""
    problems: list[str] = field(default_factory=list)  # per-skill issues (skill dropped or fixed)
    error: Optional[str] = None


def _fmt(x: Optional[float]) -> str:
    return f"{x:.2f}x" if x is not None else "not timed"


def summary_messages(task: Task, first_code: str, first_speedup: Optional[float], best_code: str,
                     best_speedup: Optional[float], best_turn: int, used: Sequence[Skill] = (),
                     existing: Sequence[str] = (), max_new_skills: int = 2) -> list[dict[str, Any]]:
    used_text = "\n".join(f"- {s.name}: {s.description}" for s in used) or "(none)"
    existing_text = ", ".join(existing) or "(the library is empty)"
    return [
        {"role": "system", "content": render("summary_system", max_new_skills=max_new_skills)},
        {"role": "user", "content": render(
            "summary_user", task_name=task.name, task_source=task.source.strip(), first_code=first_code.strip(),
            first_speedup=_fmt(first_speedup), best_code=best_code.strip(), best_speedup=_fmt(best_speedup),
            best_turn=best_turn, used_skills=used_text, existing_skills=existing_text,
            max_new_skills=max_new_skills)},
    ]


def snake_case(name: str) -> str:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name).strip())
    return re.sub(r"[^a-z0-9]+", "_", s.lower()).strip("_")


def _one_skill(item: Any, i: int, problems: list[str]) -> Optional[Skill]:
    if not isinstance(item, dict):
        problems.append(f"skill {i}: not an object")
        return None
    name = snake_case(item.get("name") or "")
    content = str(item.get("content") or "").strip()
    description = str(item.get("description") or "").strip()
    if not name:
        problems.append(f"skill {i}: no name")
        return None
    if not content or not description:
        problems.append(f"skill {name}: empty {'content' if not content else 'description'}")
        return None
    missing = [s for s in SECTIONS if s.lower() not in content.lower()]
    if missing:
        problems.append(f"skill {name}: content lacks {', '.join(missing)}")
    scope = str(item.get("scope") or "general").strip()
    if scope != "general" and not re.fullmatch(r"task_specific/[\w-]+", scope):
        problems.append(f"skill {name}: scope '{scope}' is not general or task_specific/<type>; set to general")
        scope = "general"
    tags = item.get("tags") or []
    if isinstance(tags, str):
        tags = [t.strip() for t in tags.split(",")]
    tags = [str(t).strip() for t in tags if str(t).strip()] if isinstance(tags, list) else []
    return Skill(name=name, description=description, scope=scope, tags=tags, content=content)


def parse_summary(reply: Any, max_new_skills: int = 2) -> ParsedSummary:
    if isinstance(reply, str):
        text, unclosed = strip_think(reply)
        if unclosed:
            return ParsedSummary(error=f"the reply ended inside <think> before any {TOOL_NAME} call")
        reply = text
    args = find_tool_call(reply, TOOL_NAME, "new_skills")
    if args is None:
        return ParsedSummary(error=f"no {TOOL_NAME} call with new_skills found in the reply")
    raw = args.get("new_skills")
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        return ParsedSummary(error="new_skills is not a list")
    out = ParsedSummary(think=str(args.get("think") or ""))
    seen = set()
    for i, item in enumerate(raw, 1):
        skill = _one_skill(item, i, out.problems)
        if skill is None or skill.name in seen:
            continue
        if len(out.skills) >= max_new_skills:
            out.problems.append(f"skill {skill.name}: over the limit of {max_new_skills}, dropped")
            continue
        seen.add(skill.name)
        out.skills.append(skill)
    return out
