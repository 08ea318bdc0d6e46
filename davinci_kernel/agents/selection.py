"""The Skill Selection agent: its prompt and the reading of its ``select_skills`` call.

Covers: the chat messages for one selection sample (the task plus the numbered metadata
of the candidates, formatted by ``skills.select.format_candidates``; the rerank asks for
exactly the top k, k = min(max_selected, candidates), as the release's does, or with
``allow_empty`` (``skills.allow_empty_pick``) for at most k, none allowed) and
``parse_selection``, the one parser of the agent's reply
``select_skills(think, selected_skills=[{name, reason}])``: given as text (thinking
stripped; a ``<tool_call>`` block, fenced or bare JSON, a Python-style call), a native
tool-call dict or an OpenAI-style tool-call list. Names are matched case-insensitively, a
number refers to the numbered list, unknown names and names over ``max_selected`` are
dropped (and listed), duplicates removed. The parser reports what was picked; completing a
short pick is ``rollout.selection``'s (``skills.select.complete_pick``). Does not cover: BM25
candidates or sampling (``rollout.selection``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from ..records import Skill, Task
from ..skills.select import format_candidates, pick_size
from .extract import find_tool_call, strip_think
from .templates import render

TOOL_NAME = "select_skills"


@dataclass
class ParsedSelection:
    names: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    think: str = ""
    dropped: list[str] = field(default_factory=list)  # unknown or over the limit
    error: Optional[str] = None


def pick_rules(n_candidates: int, max_selected: int, allow_empty: bool) -> tuple[str, str]:
    """The system prompt's rule and the user prompt's request on how many skills to pick."""
    k = pick_size(n_candidates, max_selected)
    if allow_empty:
        return (f"Choose at most {k} skills, only names from the list. Choosing nothing is a valid answer when "
                "no skill fits; a skill that does not apply costs the engineer attention and can mislead them.",
                f"Call `select_skills` with at most {k} of these skills (an empty list if none fits).")
    noun = "skill" if k == 1 else "skills"
    return (f"Choose exactly {k} {noun}, only names from the list: rank the candidates and give the top {k}, "
            "the best fit first.",
            f"Call `select_skills` with exactly {k} {noun} from this list, the best fit first.")


def selection_messages(task: Task, candidates: Sequence[Skill], max_selected: int = 3,
                       allow_empty: bool = False) -> list[dict[str, Any]]:
    system_rule, user_rule = pick_rules(len(candidates), max_selected, allow_empty)
    return [
        {"role": "system", "content": render("selection_system", pick_rule=system_rule)},
        {"role": "user", "content": render("selection_user", task_name=task.name, task_source=task.source.strip(),
                                           candidates=format_candidates(candidates), pick_rule=user_rule)},
    ]


def _name_list(raw: str) -> Any:
    """``selected_skills`` given as a string: a JSON list, or comma-separated names."""
    if not raw.strip().startswith("["):
        return [n.strip() for n in raw.split(",") if n.strip()]
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return None


def parse_selection(reply: Any, candidates: Sequence[Skill], max_selected: int = 3) -> ParsedSelection:
    """Everything the agent said: chosen names (valid, ≤ ``max_selected``), reasons, think,
    what was dropped; ``error`` when no usable call was found."""
    if isinstance(reply, str):
        reply, unclosed = strip_think(reply)
        if unclosed:
            return ParsedSelection(error="the reply ended inside <think> before any select_skills call")
    args = find_tool_call(reply, TOOL_NAME, "selected_skills") if isinstance(reply, (str, dict, list)) else None
    if args is None:
        return ParsedSelection(error=f"no {TOOL_NAME} call with selected_skills found in the reply")
    raw = args.get("selected_skills")
    if isinstance(raw, str):
        raw = _name_list(raw)
    if not isinstance(raw, list):
        return ParsedSelection(error="selected_skills is not a list")
    by_name = {s.name: s for s in candidates}
    by_lower = {s.name.lower(): s.name for s in candidates}
    out = ParsedSelection(think=str(args.get("think", "") or ""))
    for item in raw:
        name, reason = (item.get("name"), item.get("reason", "")) if isinstance(item, dict) else (item, "")
        if isinstance(name, int) or (isinstance(name, str) and name.strip().isdigit()):
            i = int(name) - 1  # a number refers to the numbered list
            name = candidates[i].name if 0 <= i < len(candidates) else str(name)
        if not isinstance(name, str):
            continue
        name = by_lower.get(name.strip().strip("`").lower(), name.strip())
        if name not in by_name:
            out.dropped.append(name)
        elif name not in out.names:
            if len(out.names) < max_selected:
                out.names.append(name)
                out.reasons[name] = str(reason or "")
            else:
                out.dropped.append(name)
    return out
