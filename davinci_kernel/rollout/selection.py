"""Skill schemes for one task: k samples of the selection agent plus the null scheme.

Covers: BM25 candidates from the library (``skills.select.candidates_for``), one batched
generation of k selection samples, parsing each ``select_skills`` call, and the schemes
(lists of skills) they pick; ``select_mode=bm25`` takes the BM25 top skills without the
model, ``none`` or no library gives empty schemes. Each sample is recorded as a
``Turn(role="select")``; an unparseable reply selects nothing and keeps its error.
Does not cover: the library itself or how schemes are used (``episodes``).
"""

from __future__ import annotations

from typing import Optional

from ..agents.selection import parse_selection, selection_messages
from ..records import Skill, Task, Turn
from ..skills.select import candidates_for
from .context import Context


async def select_schemes(ctx: Context, task: Task, store, k: int, step: Optional[int] = None,
                         seed: int = 0) -> tuple[list[list[Skill]], list[Turn]]:
    """(k schemes, selection turns). Fewer turns than k when the model is not asked."""
    cfg = ctx.skills
    if k <= 0:
        return [], []
    if store is None or cfg.select_mode == "none" or cfg.max_selected == 0:
        return [[] for _ in range(k)], []
    cands = candidates_for(task, store, cfg, step=step, seed=seed)
    if not cands:
        return [[] for _ in range(k)], []
    if cfg.select_mode == "bm25":
        return [list(cands[: cfg.max_selected]) for _ in range(k)], []
    msgs = selection_messages(task, cands, cfg.max_selected)
    comps = await ctx.generate([ctx.request(msgs, "select") for _ in range(k)])
    by_name = {s.name: s for s in cands}
    schemes, turns = [], []
    for i, comp in enumerate(comps):
        turn = Turn(role="select", task=task.name, messages=msgs, completion=comp, scheme=i, turn=i)
        if comp.error:
            turn.kept = False
            turn.parse_error = f"generation failed: {comp.error}"
            names: list[str] = []
        else:
            parsed = parse_selection(comp.text, cands, cfg.max_selected)
            names = parsed.names
            turn.parse_error = parsed.error
            turn.parsed = {"selected": names, "reasons": parsed.reasons, "dropped": parsed.dropped,
                           "candidates": [s.name for s in cands]}
        schemes.append([by_name[n] for n in names])
        turns.append(turn)
    return schemes, turns
