"""Our harness as a reward: one completion on one task → one float.

Covers: ``KernelReward``, which finds the task a completion answers (a task name of a
suite, a KernelBench-format problem file's text, or a ``Task``), extracts the candidate
file from the completion as the policy agent does (``agents.policy.extract_code``: the code
block that defines ``ModelNew``), judges it with the sandboxed ``Evaluator`` (one pool,
opened on first use and kept for the process), and returns the policy reward of
``reward.kind`` (any kind declared in ``reward_kinds.REWARDS``). A completion
with no code scores as a ``no_code`` failure; it never raises for what a model wrote.

Does not cover: the trainers' own calling conventions (``trl.py``, ``verl.py``).
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from ..config import EvalConfig, RewardConfig
from ..errors import UsageError
from ..records import EvalResult, Task
from ..reward_kinds import REWARDS


def completion_text(completion: Any) -> str:
    """A completion as text: a string as it is; a conversation (list of messages) → the
    content of its last assistant message."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, (list, tuple)):
        msgs = [m for m in completion if isinstance(m, dict)]
        said = [m for m in msgs if m.get("role") == "assistant"] or msgs
        return str(said[-1].get("content", "")) if said else ""
    return str(completion)


class KernelReward:
    """``KernelReward(suite="builtin", kind="released")(completion, task) -> float``."""

    def __init__(self, suite: str = "builtin", kind: str = "released", eval_cfg: Optional[EvalConfig] = None,
                 reward_cfg: Optional[RewardConfig] = None, workers: Optional[int] = None):
        self.suite = suite
        self.reward_cfg = reward_cfg or RewardConfig(kind=kind)
        if self.reward_cfg.kind not in REWARDS:
            raise UsageError(f"reward kind {self.reward_cfg.kind!r}: allowed values are {', '.join(REWARDS)}")
        self.eval_cfg = eval_cfg or EvalConfig()
        self.workers = workers
        self._tasks: Optional[dict[str, Task]] = None
        self._evaluator = None
        self._lock = threading.Lock()
        self.last: list[Optional[EvalResult]] = []  # the results behind the last batch, for logging

    # ------------------------------------------------------------------ tasks
    def task(self, key: Any) -> Task:
        """A ``Task``, a suite task's name (``level1/19_ReLU``), or a problem file's text."""
        if isinstance(key, Task):
            return key
        key = str(key)
        if "class Model" in key and "def get_inputs" in key:
            return Task(name="problem", level=0, problem_id=0, source=key, suite="inline")
        if self._tasks is None:
            from ..tasks.loader import load_suite

            self._tasks = {t.name: t for t in load_suite(self.suite)}
        if key not in self._tasks:
            raise UsageError(f"task '{key}' is not in suite {self.suite}; give a task name of that suite or the "
                             "problem file's text")
        return self._tasks[key]

    # ------------------------------------------------------------------ judging
    def evaluator(self):
        with self._lock:
            if self._evaluator is None:
                from ..evaluate import Evaluator

                self._evaluator = Evaluator(self.eval_cfg, workers=self.workers)
            return self._evaluator

    def judge(self, completions: list[Any], tasks: list[Any]) -> list[Optional[EvalResult]]:
        """One ``EvalResult`` per completion (None where it holds no candidate file)."""
        from ..agents.policy import extract_code

        items, where = [], []
        out: list[Optional[EvalResult]] = [None] * len(completions)
        for i, (c, t) in enumerate(zip(completions, tasks)):
            code = extract_code(completion_text(c)).code
            if code is not None:
                items.append((self.task(t), code))
                where.append(i)
        if items:
            for i, r in zip(where, self.evaluator().evaluate_many(items)):
                out[i] = r
        return out

    def rewards(self, completions: list[Any], tasks: list[Any]) -> list[float]:
        from ..rollout.rewards import policy_reward

        if len(completions) != len(tasks):
            raise UsageError(f"{len(completions)} completions for {len(tasks)} tasks")
        self.last = self.judge(completions, tasks)
        return [float(policy_reward(r, self.reward_cfg)) for r in self.last]

    def __call__(self, completion: Any, task: Any) -> float:
        return self.rewards([completion], [task])[0]

    def close(self) -> None:
        with self._lock:
            if self._evaluator is not None:
                self._evaluator.close()
                self._evaluator = None
