"""The Skill Selection agent: its prompt and the reading of its ``select_skills`` call.

Covers: the chat messages for one selection sample (the task plus the numbered metadata
of the candidates, formatted by ``skills.select.format_candidates``) and parsing the reply
(thinking stripped, then ``skills.select.parse_selection_detail``, which knows the tool-call
shapes and validates names). Does not cover: BM25 candidates or sampling (``rollout``).
"""

from __future__ import annotations

from typing import Any, Sequence

from ..records import Skill, Task
from ..skills.select import ParsedSelection, format_candidates, parse_selection_detail
from .extract import strip_think
from .templates import render


def selection_messages(task: Task, candidates: Sequence[Skill], max_selected: int = 3) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": render("selection_system", max_selected=max_selected)},
        {"role": "user", "content": render("selection_user", task_name=task.name, task_source=task.source.strip(),
                                           candidates=format_candidates(candidates), max_selected=max_selected)},
    ]


def parse_selection(reply: str, candidates: Sequence[Skill], max_selected: int = 3) -> ParsedSelection:
    text, unclosed = strip_think(reply)
    if unclosed:
        return ParsedSelection(error="the reply ended inside <think> before any select_skills call")
    return parse_selection_detail(text, candidates, max_selected)
