"""Prompt templates: markdown files under ``agents/prompts/`` with ``{{name}}`` slots.

Covers: loading a template by name (cached) and filling its slots. Double braces keep
single braces in code and JSON examples literal. A slot left unfilled is our bug and
raises. Does not cover: what goes into the slots (the role modules decide).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

PROMPT_DIR = Path(__file__).parent / "prompts"
_SLOT = re.compile(r"\{\{(\w+)\}\}")


@cache
def load(name: str) -> str:
    return (PROMPT_DIR / f"{name}.md").read_text(encoding="utf-8")


def render(name: str, **values) -> str:
    text = load(name)
    missing = sorted(set(_SLOT.findall(text)) - set(values))
    if missing:
        raise KeyError(f"prompt '{name}' needs values for: {', '.join(missing)}")
    return _SLOT.sub(lambda m: str(values[m.group(1)]), text).strip() + "\n"
