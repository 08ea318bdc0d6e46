"""Skills as markdown files: YAML front matter for the metadata, the body as content.

Covers: reading a skill file (``---`` front matter with name, description, scope,
tags, optional verify_speedup and extra keys such as ``bench``; the body is the
content) and pulling the fenced code blocks out of a skill's
``## Example`` section. This is the human-editable form of a skill (``dvk skills
add FILE`` and the seed library's sources); JSONL stays the exchange format.

Does not cover: validation beyond parsing (``schema``) or storage (``store``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from ..errors import UsageError, read_text_file
from ..records import Skill
from .schema import sections, skill_from_dict

_FRONT_RE = re.compile(r"\A---\s*\n(.*?)\n---\s*\n(.*)\Z", re.S)
_FENCE_RE = re.compile(r"```([A-Za-z0-9_+-]*)\s*\n(.*?)```", re.S)


def parse_skill_text(text: str, where: str = "<text>") -> tuple[Skill, dict[str, Any]]:
    """Markdown with front matter (or one JSON object) → ``(skill, extra_keys)``.
    Raises UsageError naming ``where`` and the problem."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as e:
            raise UsageError(f"{where}: not valid JSON ({e.msg} at line {e.lineno})") from None
    else:
        m = _FRONT_RE.match(text)
        if not m:
            raise UsageError(f"{where}: expected a '---' front matter block, then the markdown content with "
                             f"## Motivation, ## Key Idea and ## Example, or one JSON object; a skill file starts "
                             f"'---', 'name: my_skill', 'description: ...', 'scope: general', 'tags: [a, b]', "
                             f"'---' (docs/guides/skills.md, 'Writing a skill')")
        try:
            data = yaml.safe_load(m.group(1)) or {}
        except yaml.YAMLError as e:
            raise UsageError(f"{where}: front matter is not valid YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(data, dict):
            raise UsageError(f"{where}: front matter must be a mapping")
        data["content"] = m.group(2).strip() + "\n"
    try:
        skill = skill_from_dict(data)
    except ValueError as e:
        raise UsageError(f"{where}: skill rejected: {e}") from None
    extra = {k: v for k, v in data.items()
             if k not in ("name", "description", "scope", "tags", "content", "verify_speedup")}
    return skill, extra


def read_skill_file(path: str | Path) -> tuple[Skill, dict[str, Any]]:
    p = Path(path).expanduser()
    return parse_skill_text(read_text_file(p, "skill file"), where=str(p))


def example_blocks(content: str) -> list[tuple[str, str]]:
    """``[(language, code), ...]`` of the fenced blocks under ``## Example``."""
    body = sections(content).get("Example", "")
    return [(m.group(1).lower() or "python", m.group(2)) for m in _FENCE_RE.finditer(body)]
