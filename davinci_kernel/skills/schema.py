"""The shape of a skill: what a valid exchange record looks like.

Covers: turning one JSON object of the JSONL exchange format into a ``Skill``
(types checked, unknown keys ignored) and the structural checks every skill in a
library passes: a snake_case name, a description, a scope of ``general`` or
``task_specific/<type>``, a list of string tags, and markdown content with the
sections ``## Motivation``, ``## Key Idea`` and ``## Example``.

Does not cover: judging what the content recommends (``admit.content_filter``)
or storing skills (``store``).
"""

from __future__ import annotations

import re
from typing import Any, Optional

from ..records import Skill

REQUIRED_SECTIONS = ("## Motivation", "## Key Idea", "## Example")
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")
SCOPE_RE = re.compile(r"^(general|task_specific/[A-Za-z0-9_.\-]+)$")
_SECTION_RE = re.compile(r"^##\s+(.+?)\s*$", re.M)


def sections(content: str) -> dict[str, str]:
    """``{"Motivation": text, "Key Idea": text, ...}`` for each ``## `` heading."""
    out: dict[str, str] = {}
    matches = list(_SECTION_RE.finditer(content))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(content)
        out[m.group(1)] = content[m.end():end].strip()
    return out


def check_structure(skill: Skill) -> Optional[str]:
    """None when the skill is well formed, else the first reason it is not."""
    if not isinstance(skill.name, str) or not NAME_RE.match(skill.name):
        return f"name {skill.name!r} is not snake_case (lowercase letters, digits, single underscores)"
    if not isinstance(skill.description, str) or not skill.description.strip():
        return "description is empty"
    if not isinstance(skill.scope, str) or not SCOPE_RE.match(skill.scope):
        return f"scope {skill.scope!r} must be 'general' or 'task_specific/<type>'"
    if not isinstance(skill.tags, list) or not all(isinstance(t, str) for t in skill.tags):
        return "tags must be a list of strings"
    if not isinstance(skill.content, str) or not skill.content.strip():
        return "content is empty"
    found = sections(skill.content)
    for heading in REQUIRED_SECTIONS:
        title = heading[3:]
        if title not in found:
            return f"content lacks the section '{heading}'"
        if not found[title]:
            return f"section '{heading}' is empty"
    if skill.verify_speedup is not None and not isinstance(skill.verify_speedup, (int, float)):
        return "verify_speedup must be a number or null"
    return None


def skill_from_dict(data: Any) -> Skill:
    """One exchange-format object → Skill; raises ValueError saying what is wrong."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    for key in ("name", "description", "content"):
        if key not in data:
            raise ValueError(f"missing field '{key}'")
    tags = data.get("tags") or []
    if isinstance(tags, str):
        tags = [t.strip() for t in tags.split(",") if t.strip()]
    speed = data.get("verify_speedup")
    if speed is not None:
        try:
            speed = float(speed)
        except (TypeError, ValueError):
            raise ValueError(f"verify_speedup {speed!r} is not a number") from None
    skill = Skill(name=data["name"], description=data["description"],
                  scope=data.get("scope") or "general", tags=list(tags),
                  content=data["content"], verify_speedup=speed,
                  source_task=data.get("source_task"), step=data.get("step"), gpu=data.get("gpu"))
    reason = check_structure(skill)
    if reason:
        raise ValueError(reason)
    return skill
