"""What every stage of a task group shares: the backbone, the evaluator, the configs.

Covers: ``Context`` (backend, evaluator, rollout/reward/skills configs, an optional
progress callback) with the request of one role's call (its sampling settings and
generation limit) and the two timed calls every stage goes through — ``generate``
(batched, async) and ``evaluate`` (``Evaluator.evaluate_many`` in a thread, so the event
loop stays free; ``fresh=True`` for a verdict judged anew) — and ``GroupStats``, the
seconds spent in each, which the overhead benchmark subtracts from wall time. Does not
cover: what to generate or evaluate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from ..config import RewardConfig, RolloutConfig, SkillsConfig
from ..llm.base import Backend, GenRequest
from ..records import Completion, EvalResult, Task


@dataclass
class GroupStats:
    gen_seconds: float = 0.0
    eval_seconds: float = 0.0
    gen_calls: int = 0
    eval_calls: int = 0
    gen_tokens: int = 0


@dataclass
class Context:
    backend: Backend
    evaluator: Any  # anything with evaluate_many(items) -> list[EvalResult]
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    rewards: RewardConfig = field(default_factory=RewardConfig)
    skills: SkillsConfig = field(default_factory=SkillsConfig)
    progress: Optional[Callable[[str, int], None]] = None  # (event, count)
    stats: GroupStats = field(default_factory=GroupStats)

    def request(self, messages: list[dict], role: str, greedy: bool = False) -> GenRequest:
        """One call by ``role`` ("select", "policy", "summary"), with that role's generation
        limit (``RolloutConfig.max_new_tokens_for``)."""
        r = self.rollout
        return GenRequest(messages=messages, temperature=0.0 if greedy else r.temperature,
                          top_p=r.top_p, max_new_tokens=r.max_new_tokens_for(role))

    def tick(self, event: str, count: int = 1) -> None:
        if self.progress is not None and count:
            self.progress(event, count)

    async def generate(self, requests: list[GenRequest]) -> list[Completion]:
        if not requests:
            return []
        t0 = time.perf_counter()
        out = await self.backend.generate(requests)
        self.stats.gen_seconds += time.perf_counter() - t0
        self.stats.gen_calls += len(requests)
        self.stats.gen_tokens += sum(len(c.token_ids or []) for c in out)
        self.tick("generated", len(requests))
        return out

    async def evaluate(self, items: list[tuple[Task, str]], fresh: bool = False) -> list[EvalResult]:
        """``fresh``: judged anew, never a verdict given before (verification asks for it; an
        evaluator that reuses verdicts offers ``evaluate_fresh`` for it)."""
        if not items:
            return []
        t0 = time.perf_counter()
        judge = getattr(self.evaluator, "evaluate_fresh", None) if fresh else None
        out = await asyncio.to_thread(judge or self.evaluator.evaluate_many, items)
        self.stats.eval_seconds += time.perf_counter() - t0
        self.stats.eval_calls += len(items)
        self.tick("evaluated", len(items))
        return out
