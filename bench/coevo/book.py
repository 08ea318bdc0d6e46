"""The run's verdicts: a source judged once on a task keeps its verdict for policy turns,
and verification always gets a fresh one.

``VerdictBook`` wraps an ``Evaluator`` whose own reuse is off (``eval.reuse_verdicts=false``)
and stands in for it in the trainer's environment: ``evaluate_many`` (the rollouts) gives a
source already judged on the same task that verdict (marked ``reused``) and judges the rest
once each; ``evaluate_fresh`` (the rollout's verification of a new skill) judges every
source anew and never reads or writes the book, so no admission rests on an earlier verdict.
The book is seeded with the verdicts ``prepare`` gave the variants. Does not cover: judging
(``davinci_kernel.evaluate``).
"""

from __future__ import annotations

import copy
import hashlib
import threading
from typing import Optional

# verdicts that may go otherwise next time (the evaluator's own reuse keeps none of these)
NOT_KEPT = frozenset({"harness_error", "no_worker", "timeout", "protocol_error", "worker_crash"})


def _key(task, source: str) -> tuple[str, str]:
    return task.hash, hashlib.sha256(source.encode()).hexdigest()


class VerdictBook:
    def __init__(self, evaluator):
        if getattr(getattr(evaluator, "cfg", None), "reuse_verdicts", False):
            raise ValueError("the verdict book needs an evaluator with eval.reuse_verdicts=false")
        self.inner = evaluator
        self._known: dict[tuple[str, str], object] = {}
        self._busy: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()
        self.judged = 0  # policy sources judged by this book (not seeded, not reused)
        self.fresh: list[dict] = []  # every fresh verdict: task, correct, speedup

    # the Evaluator surface the trainer's environment reads
    @property
    def n_workers(self) -> int:
        return self.inner.n_workers

    @property
    def sandbox_description(self) -> Optional[str]:
        return getattr(self.inner, "sandbox_description", None)

    @property
    def cfg(self):
        return self.inner.cfg

    def close(self) -> None:
        self.inner.close()

    def remember(self, task, source: str, result) -> None:
        with self._lock:
            self._known[_key(task, source)] = copy.deepcopy(result)

    def __len__(self) -> int:
        return len(self._known)

    def evaluate_many(self, items: list, progress=None) -> list:
        """Rollout sources: a verdict from the book where there is one, else judged once
        (the same source given twice, here or by another thread at once, is judged once)."""
        keys = [_key(t, s) for t, s in items]
        mine: dict[tuple[str, str], int] = {}
        wait: dict[tuple[str, str], threading.Event] = {}
        with self._lock:
            for i, k in enumerate(keys):
                if k in self._known or k in mine:
                    continue
                if k in self._busy:
                    wait[k] = self._busy[k]
                else:
                    mine[k] = i
                    self._busy[k] = threading.Event()
        new: dict = {}
        try:
            got = self.inner.evaluate_many([items[i] for i in mine.values()]) if mine else []
            new = dict(zip(mine, got))
        finally:
            with self._lock:
                for k, r in new.items():
                    if r.error_kind not in NOT_KEPT:
                        self._known[k] = copy.deepcopy(r)
                self.judged += len(new)
                for k in mine:
                    self._busy.pop(k).set()
        for ev in wait.values():
            ev.wait()
        left = {k: i for i, k in enumerate(keys) if k not in new and k not in self._known}
        if left:  # judged elsewhere with a verdict that is not kept: judged here
            new.update(zip(left, self.inner.evaluate_many([items[i] for i in left.values()])))
        out = []
        for i, k in enumerate(keys):
            if k in new:
                r = copy.deepcopy(new[k])
            else:
                r = copy.deepcopy(self._known[k])
                r.reused, r.eval_seconds, r.phase_seconds = True, 0.0, {}
            if progress is not None:
                progress(i, r)
            out.append(r)
        return out

    def evaluate_fresh(self, items: list, progress=None) -> list:
        """Verification: every source judged anew (one judging for a source given twice in
        this call); the book is neither read nor written."""
        keys = [_key(t, s) for t, s in items]
        first: dict[tuple[str, str], int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        got = dict(zip(first, self.inner.evaluate_many([items[i] for i in first.values()]))) if first else {}
        out = []
        for i, k in enumerate(keys):
            r = copy.deepcopy(got[k])
            r.reused = False
            out.append(r)
            if progress is not None:
                progress(i, r)
        with self._lock:
            self.fresh += [{"task": items[i][0].name, "correct": bool(got[k].correct), "speedup": got[k].speedup}
                           for k, i in first.items()]
        return out
