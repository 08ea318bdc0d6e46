"""A reward function for TRL's ``GRPOTrainer`` (``reward_funcs=[...]``).

Covers: ``kernel_reward_func(...)``, which returns a function with TRL's reward calling
convention — ``f(prompts, completions, **columns) -> list[float]``, where ``completions``
are strings or conversations and every dataset column arrives as a keyword list — that
reads the task of each row from the dataset column ``task_column`` (a task name of
``suite``, or a KernelBench problem file's text) and returns our policy reward of ``kind``
for each completion (``kernel_reward.KernelReward``). TRL logs it under the function's name,
``dvk_<kind>``.

Does not cover: building the dataset (one row per prompt with a ``task`` column) or TRL
itself, which this module never imports.
"""

from __future__ import annotations

from typing import Any, Optional

from ..config import EvalConfig
from ..errors import UsageError
from .kernel_reward import KernelReward


def kernel_reward_func(suite: str = "builtin", kind: str = "released", task_column: str = "task",
                       eval_cfg: Optional[EvalConfig] = None, workers: Optional[int] = None):
    """A ``reward_funcs`` entry; its ``.scorer`` holds the evaluator (``.scorer.close()`` ends it)."""
    scorer = KernelReward(suite=suite, kind=kind, eval_cfg=eval_cfg, workers=workers)

    def reward(prompts: Any = None, completions: Any = None, **columns) -> list[float]:
        tasks = columns.get(task_column)
        if tasks is None:
            raise UsageError(f"the dataset has no '{task_column}' column: give each row the task it asks for "
                             "(a task name of the suite, or the problem file's text)")
        return scorer.rewards(list(completions or []), list(tasks))

    reward.__name__ = f"dvk_{kind}"
    reward.scorer = scorer
    return reward
