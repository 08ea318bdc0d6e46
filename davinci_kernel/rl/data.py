"""Deterministic task order for training.

Covers: ``TaskSampler``, which walks an endless sequence of seeded epoch permutations
of the training tasks; step s (1-based) takes positions [(s−1)·B, s·B). The data cursor
is therefore a function of the step alone, so a resumed run sees exactly the task
order of an uninterrupted one. ``extra_for`` draws the tasks dynamic sampling adds to a
step (``dynamic.py``): seeded by the step, the process and the round, so they too are the same
in a resumed run, and they leave the cursor where it is. Does not cover: loading tasks
(``tasks/``).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence


class TaskSampler:
    def __init__(self, tasks: Sequence, batch: int, seed: int = 0):
        if not tasks:
            raise ValueError("no training tasks")
        self.tasks = list(tasks)
        self.batch = batch
        self.seed = seed
        self._perms: dict[int, list[int]] = {}

    def _perm(self, epoch: int) -> list[int]:
        if epoch not in self._perms:
            order = list(range(len(self.tasks)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            self._perms[epoch] = order
        return self._perms[epoch]

    def cursor(self, step: int) -> int:
        """Tasks consumed after ``step`` steps."""
        return step * self.batch

    def batch_for(self, step: int) -> list:
        n = len(self.tasks)
        out = []
        for pos in range(self.cursor(step - 1), self.cursor(step)):
            epoch, i = divmod(pos, n)
            out.append(self.tasks[self._perm(epoch)[i]])
        return out

    def extra_for(self, step: int, rank: int, round_: int, n: int, exclude: Collection[str] = ()) -> list:
        """``n`` further tasks for round ``round_`` of ``step`` on process ``rank`` (round 0: dynamic
        sampling's up-front oversampling; ≥ 1: its further rounds): tasks
        whose names are not in ``exclude`` first, in a seeded order, then (when those run out)
        any task again."""
        rng = random.Random(((self.seed * 1_000_003 + step) * 1009 + rank) * 101 + round_)
        skip = set(exclude)
        fresh = [t for t in self.tasks if getattr(t, "name", t) not in skip]
        rng.shuffle(fresh)
        out = fresh[:n]
        while len(out) < n:
            again = list(self.tasks)
            rng.shuffle(again)
            out += again[:n - len(out)]
        return out
