"""Choosing the skills for a task: BM25 candidates, then the selection agent's rerank.

Covers: ``candidates_for`` (BM25 top-k of the library for a task),
``format_candidates`` (the numbered metadata list the selection agent reads:
name, scope, tags, description; never the content), ``parse_selection`` (the
agent's ``select_skills(think, selected_skills=[{name, reason}])`` call, given as
a native tool-call dict, an OpenAI-style tool call, or a JSON block in text;
unknown names dropped, duplicates removed, at most ``max_selected``), and
``select`` for the modes ``llm`` (rerank through a callable the caller supplies),
``bm25`` (top candidates, no rerank) and ``none``.

Does not cover: the prompt around the metadata list (the agents' prompt
templates own it) or calling the model (the caller's ``rerank`` does).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from ..config import ConfigError
from ..records import Skill, Task
from .bm25 import SkillIndex, task_query

TOOL_NAME = "select_skills"

_index_cache: dict[tuple, SkillIndex] = {}


def _index_for(skills: list[Skill]) -> SkillIndex:
    key = tuple((s.name, s.step, len(s.content)) for s in skills)
    idx = _index_cache.get(key)
    if idx is None:
        _index_cache.clear()
        idx = _index_cache[key] = SkillIndex(skills)
    return idx


def candidates_for(task: Task, store, cfg, step: Optional[int] = None, seed: int = 0) -> list[Skill]:
    """BM25 top ``cfg.bm25_top_k`` skills of the library (as of ``step``) for ``task``."""
    skills = store.all(step) if hasattr(store, "all") else list(store)
    return _index_for(skills).search(task_query(task), k=cfg.bm25_top_k, seed=seed)


def format_candidates(skills: Sequence[Skill]) -> str:
    """``1. name [scope] (tags): description`` — one numbered line per candidate."""
    return "\n".join(f"{i}. {s.metadata_line()}" for i, s in enumerate(skills, 1))


# --------------------------------------------------------------------------- parsing
@dataclass
class ParsedSelection:
    names: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    think: str = ""
    dropped: list[str] = field(default_factory=list)  # unknown or over the limit
    error: Optional[str] = None


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None


def parse_selection_detail(reply: Any, candidates: Sequence[Skill], max_selected: int = 3) -> ParsedSelection:
    """Everything the agent said: chosen names (valid, ≤ max), reasons, think, what was dropped."""
    from ..agents.extract import find_tool_call  # the one tool-call extractor (imported late: agents use this module)

    args = find_tool_call(reply, TOOL_NAME, "selected_skills") if isinstance(reply, (str, dict, list)) else None
    if args is None:
        return ParsedSelection(error=f"no {TOOL_NAME} call with selected_skills found in the reply")
    raw = args.get("selected_skills")
    if isinstance(raw, str):
        raw = _loads(raw) if raw.strip().startswith("[") else [n.strip() for n in raw.split(",") if n.strip()]
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


def parse_selection(reply: Any, candidates: Sequence[Skill], max_selected: int = 3
                    ) -> tuple[list[str], Optional[str]]:
    """``(names, error_or_None)`` for the agent's reply (text or tool-call dict)."""
    p = parse_selection_detail(reply, candidates, max_selected)
    return p.names, p.error


# --------------------------------------------------------------------------- select
@dataclass
class Selection:
    """What ``select`` decided, with what it saw (for the rollout's records)."""

    skills: list[Skill]
    candidates: list[Skill]
    mode: str
    reply: Any = None
    parsed: Optional[ParsedSelection] = None

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.skills]

    @property
    def error(self) -> Optional[str]:
        return self.parsed.error if self.parsed else None


def select(task: Task, store, cfg, rerank: Optional[Callable[[str], Any]] = None,
           step: Optional[int] = None, seed: int = 0) -> Selection:
    """Skills for ``task`` by ``cfg.select_mode``.

    ``rerank`` (mode ``llm``) receives the numbered metadata list of the BM25
    candidates and returns the model's reply (text or tool-call dict). A reply
    that cannot be parsed selects nothing and is recorded in ``Selection.parsed``."""
    mode = cfg.select_mode
    if mode == "none" or cfg.max_selected == 0:
        return Selection(skills=[], candidates=[], mode=mode)
    cands = candidates_for(task, store, cfg, step=step, seed=seed)
    if mode == "bm25":
        return Selection(skills=cands[: cfg.max_selected], candidates=cands, mode=mode)
    if mode != "llm":
        raise ConfigError(f"skills.select_mode={mode!r}: allowed values are llm, bm25, none")
    if rerank is None:
        raise ConfigError("skills.select_mode=llm needs a model to rerank with; "
                          "pass rerank=... or set skills.select_mode=bm25")
    if not cands:
        return Selection(skills=[], candidates=[], mode=mode)
    reply = rerank(format_candidates(cands))
    parsed = parse_selection_detail(reply, cands, cfg.max_selected)
    by_name = {s.name: s for s in cands}
    return Selection(skills=[by_name[n] for n in parsed.names], candidates=cands, mode=mode,
                     reply=reply, parsed=parsed)
