"""Failed model calls of a command, said out loud.

Covers: counting the model calls of task groups whose completion failed (``Completion.error``:
an HTTP error the client did not retry away, a dead server), the one line that says how many
failed and the first reason, and ``AllCallsFailed`` when every call failed (``cli.main``:
exit 3). Does not cover: retrying (``llm``) or what a failed call does to an episode.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

from ..errors import AllCallsFailed
from ..records import TaskGroup, Turn


@dataclass
class CallFailures:
    failed: int = 0
    total: int = 0
    first: Optional[str] = None  # the first failure's reason

    def add(self, turns: Iterable[Turn]) -> None:
        for t in turns:
            if t.completion is None:
                continue
            self.total += 1
            if t.completion.error:
                self.failed += 1
                self.first = self.first or t.completion.error

    def line(self) -> Optional[str]:
        """``N of M model calls failed; the first: REASON`` (None when none failed)."""
        if not self.failed:
            return None
        return f"{self.failed} of {self.total} model calls failed; the first: {self.first}"

    @property
    def all_failed(self) -> bool:
        return bool(self.total) and self.failed == self.total

    def check(self) -> None:
        """``AllCallsFailed`` when there were calls and every one failed."""
        if self.all_failed:
            raise AllCallsFailed(f"every model call failed ({self.failed} of {self.total}); the first: {self.first}")


def group_turns(group: TaskGroup) -> list[Turn]:
    """Every model call of a task group: selections, policy turns, summaries, verifications."""
    return [*group.selections, *(t for ep in group.episodes for t in ep.turns), *group.summaries,
            *group.verifications]


def count(groups: Iterable[TaskGroup]) -> CallFailures:
    cf = CallFailures()
    for g in groups:
        cf.add(group_turns(g))
    return cf
