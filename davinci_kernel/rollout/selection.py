"""Skill schemes for one task: k samples of the selection agent plus the null scheme.

Covers: BM25 candidates from the library (``skills.select.candidates_for``), one batched
generation of k selection samples, parsing each ``select_skills`` call, and the schemes
(lists of skills) they pick; ``select_mode=bm25`` takes the BM25 top skills without the
model, ``none`` or no library gives empty schemes. Each sample is recorded as a
``Turn(role="select")``. The rerank asks for the top k (k = min(max_selected, candidates)):
with ``skills.allow_empty_pick`` off (the default, as the release), a pick short of k (an
empty one, one with unknown names, an unreadable reply or a failed generation) is completed
with the best-ranked BM25 candidates it lacks (``skills.select.complete_pick``), so every
sampled scheme holds k skills; the turn records the names added (``parsed["filled"]``) and a
``parse_error`` naming the shortfall (so SFT never copies it), and is trained like any other
with its scheme's reward. With the switch on, the pick is used as it is (an unreadable reply
selects nothing).
Does not cover: the library itself or how schemes are used (``episodes``).
"""

from __future__ import annotations

from typing import Optional

from ..agents.selection import parse_selection, selection_messages
from ..records import Skill, Task, Turn
from ..skills.select import candidates_for, complete_pick, pick_size
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
    msgs = selection_messages(task, cands, cfg.max_selected, cfg.allow_empty_pick)
    comps = await ctx.generate([ctx.request(msgs, "select") for _ in range(k)])
    by_name = {s.name: s for s in cands}
    want = pick_size(len(cands), cfg.max_selected)
    schemes, turns = [], []
    for i, comp in enumerate(comps):
        turn = Turn(role="select", task=task.name, messages=msgs, completion=comp, scheme=i, turn=i)
        if comp.error:
            turn.kept = False
            turn.parse_error = f"generation failed: {comp.error}"
            names: list[str] = []
            parsed = None
        else:
            parsed = parse_selection(comp.text, cands, cfg.max_selected)
            names = parsed.names
            turn.parse_error = parsed.error
        filled: list[str] = []
        if not cfg.allow_empty_pick and len(names) < want:
            full = complete_pick(names, cands, cfg.max_selected)
            filled = full[len(names):]
            short = f"picked {len(names)} of the {want} skills asked; completed in BM25 order"
            turn.parse_error = f"{turn.parse_error}; {short}" if turn.parse_error else short
            names = full
        if parsed is not None:
            turn.parsed = {"selected": names, "reasons": parsed.reasons, "dropped": parsed.dropped,
                           "candidates": [s.name for s in cands], "filled": filled}
        schemes.append([by_name[n] for n in names])
        turns.append(turn)
    return schemes, turns
