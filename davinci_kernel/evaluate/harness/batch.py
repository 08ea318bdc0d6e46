"""One judgement per distinct candidate of a batch: duplicates get a copy of its verdict.

Covers: grouping a batch's (task, source) items by what a verdict is known by (the task's
hash and the source text, byte for byte: ``verdict_key``), so that ``evaluate_many`` judges
each distinct item once (its first occurrence, the leader) and hands every later duplicate
a copy marked ``reused`` (an RL step samples the same kernel several times; each copy would
cost a worker, a compile and a timing, and the same text must earn the same reward). A
leader whose verdict may go otherwise next time (a harness failure, no worker, a timeout,
a protocol error, a crash: ``NOT_REUSED``) leaves its duplicates to be judged each on their
own. Does not cover: judging (``evaluator.py``), verdicts kept across batches
(``eval.reuse_verdicts``), or fresh verdicts (``evaluate_fresh`` judges every item).
"""

from __future__ import annotations

import copy
import hashlib
import time
from typing import Optional

from ...records import EvalResult, Task

# verdicts that may go otherwise next time: never copied to a duplicate, never kept for reuse
NOT_REUSED = frozenset({"harness_error", "no_worker", "timeout", "protocol_error", "worker_crash"})


def verdict_key(task: Task, source: Optional[str]) -> tuple[str, str]:
    """(task hash, source hash): what a verdict is known by (None: the problem's own Model)."""
    text = "\0self-check" if source is None else source
    return task.hash, hashlib.sha256(text.encode()).hexdigest()


def group(items: list[tuple[Task, Optional[str]]]) -> dict[int, list[int]]:
    """Leader index -> the indices of its later duplicates (empty for a unique item), in
    the order the items came."""
    first: dict[tuple[str, str], int] = {}
    out: dict[int, list[int]] = {}
    for i, (task, source) in enumerate(items):
        k = verdict_key(task, source)
        if k in first:
            out[first[k]].append(i)
        else:
            first[k] = i
            out[i] = []
    return out


def reusable(res: EvalResult) -> bool:
    """A verdict a duplicate may take as its own."""
    return res.error_kind not in NOT_REUSED


def copy_for_duplicate(res: EvalResult, since: float) -> EvalResult:
    """An earlier verdict for a duplicate (of a batch's leader, or a verdict kept for reuse):
    marked ``reused``, no phases of its own, ``eval_seconds`` the time since ``since`` (its
    batch or call began: what its caller waited)."""
    again = copy.deepcopy(res)
    again.reused, again.phase_seconds = True, {}
    again.eval_seconds = time.monotonic() - since
    return again
