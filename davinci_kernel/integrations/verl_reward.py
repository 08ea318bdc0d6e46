"""A custom reward function for verl (``custom_reward_function.path`` / ``.name``).

Covers: ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)``,
verl's documented signature for a custom score function: ``solution_str`` is the decoded
response, the task is ``extra_info["task"]`` when given, else ``ground_truth`` (a task name of
the suite, or a KernelBench problem file's text). It returns verl's dictionary form:
``score`` (our policy reward) plus ``correct``, ``compiled`` and ``speedup`` (0 when untimed),
which verl logs beside it. Options come through ``custom_reward_function.reward_kwargs``:
``reward_kind`` (a kind of ``reward_kinds.REWARDS``), ``suite``, ``device``. One evaluator is kept per
process and per option set.

Does not cover: verl itself (never imported here; it does not install beside this
package's transformers), or a batched reward manager.
"""

from __future__ import annotations

from typing import Any, Optional

from ..config import EvalConfig
from .kernel_reward import KernelReward

_SCORERS: dict[tuple, KernelReward] = {}


def _scorer(kind: str, suite: str, device: str) -> KernelReward:
    key = (kind, suite, device)
    if key not in _SCORERS:
        _SCORERS[key] = KernelReward(suite=suite, kind=kind, eval_cfg=EvalConfig(device=device))
    return _SCORERS[key]


def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Optional[dict] = None,
                  reward_kind: str = "released", suite: str = "builtin", device: str = "auto", **kwargs) -> dict:
    scorer = _scorer(reward_kind, suite, device)
    task = (extra_info or {}).get("task") or ground_truth
    score = scorer.rewards([solution_str], [task])[0]
    r = scorer.last[0]
    return {"score": score, "correct": float(bool(r is not None and r.correct)),
            "compiled": float(bool(r is not None and r.compiled)),
            "speedup": float(r.speedup) if r is not None and r.speedup is not None else 0.0}
