"""The library side of choosing skills for a task: BM25 candidates and their metadata list.

Covers: ``candidates_for`` (BM25 top-k of the library for a task, the index cached per
library version), ``format_candidates`` (the numbered metadata list the selection
agent reads: name, scope, tags, description; never the content), ``pick_size`` (how many
skills the rerank asks for: the top k, k = min(max_selected, candidates)) and
``complete_pick`` (a pick short of that, completed in BM25 order).

Does not cover: the prompt around the list or reading the agent's ``select_skills`` call
(``agents.selection``), or running the agent and the selection modes (``rollout.selection``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from ..records import Skill, Task
from .bm25 import SkillIndex, task_query

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


def pick_size(n_candidates: int, max_selected: int) -> int:
    """The skills the rerank asks for: min(``max_selected``, ``n_candidates``), at least 0."""
    return max(0, min(max_selected, n_candidates))


def complete_pick(picked: Sequence[str], candidates: Sequence[Skill], max_selected: int) -> list[str]:
    """``picked`` (valid names, in the agent's order), then the best-ranked ``candidates`` (BM25
    order) not picked, until ``pick_size`` names; a pick already that long is cut to it."""
    want = pick_size(len(candidates), max_selected)
    out = list(dict.fromkeys(picked))[:want]
    for s in candidates:
        if len(out) >= want:
            break
        if s.name not in out:
            out.append(s.name)
    return out
