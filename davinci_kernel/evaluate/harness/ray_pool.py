"""Evaluation on a Ray cluster: one evaluator actor per GPU (or CPU slot), anywhere.

Covers: starting or joining a Ray cluster (``ray.init(address="auto")`` when one runs,
else a local one), one actor per slot, each owning an ``Evaluator`` with a single local
worker on its own device, and ``evaluate_many`` with the same contract as the local
pool. Records cross as dicts. Does not cover: judging (evaluator.py); installing Ray
(``pip install davinci-kernel[ray]``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from ...config import EvalConfig
from ...errors import UsageError
from ...records import EvalResult, Task


class _Actor:
    def __init__(self, cfg_dict: dict):
        from ...config import EvalConfig
        from .evaluator import Evaluator

        self.ev = Evaluator(EvalConfig(**cfg_dict), workers=1)

    def evaluate(self, task_dict: dict, source: str, fresh: bool = False) -> dict:
        return self.ev.evaluate(Task.from_dict(task_dict), source, fresh=fresh).to_dict()

    def close(self) -> None:
        self.ev.close()


class RayEvaluator:
    def __init__(self, cfg: Optional[EvalConfig] = None, workers: Optional[int] = None, address: Optional[str] = None):
        try:
            import ray
        except ImportError:
            raise UsageError("--backend ray needs Ray: pip install 'davinci-kernel[ray]'") from None
        import dataclasses

        self.cfg = cfg or EvalConfig()
        if not ray.is_initialized():
            try:
                ray.init(address=address or "auto", ignore_reinit_error=True, log_to_driver=False)
            except (ConnectionError, RuntimeError, ValueError):
                ray.init(ignore_reinit_error=True, log_to_driver=False, include_dashboard=False)
        self.ray = ray
        res = ray.cluster_resources()
        gpus = int(res.get("GPU", 0))
        self.device = "cuda" if (gpus and self.cfg.device != "cpu") else "cpu"
        if self.device == "cuda":
            n = workers or gpus
            opts = {"num_gpus": 1, "num_cpus": 1}
        else:
            n = workers or max(1, min(2, int(res.get("CPU", 1))))
            opts = {"num_cpus": 1}
        cfg_dict = dataclasses.asdict(self.cfg)
        cfg_dict["device"] = "cuda" if self.device == "cuda" else "cpu"
        actor_cls = ray.remote(**opts)(_Actor)
        self.actors = [actor_cls.remote(cfg_dict) for _ in range(n)]
        self.n_workers = n

    def evaluate_fresh(self, items: list[tuple[Task, str]],
                       progress: Optional[Callable[[int, EvalResult], None]] = None) -> list[EvalResult]:
        """``evaluate_many`` with every verdict judged anew (no reused verdict)."""
        return self.evaluate_many(items, progress, fresh=True)

    def evaluate_many(self, items: list[tuple[Task, str]],
                      progress: Optional[Callable[[int, EvalResult], None]] = None,
                      fresh: bool = False) -> list[EvalResult]:
        """The local evaluator's contract: the same source given more than once for a task
        is judged once (``batch.py``), unless ``fresh``."""
        import time

        from . import batch

        ray = self.ray
        results: list[Optional[EvalResult]] = [None] * len(items)
        t0 = time.monotonic()
        leaders = {i: [] for i in range(len(items))} if fresh else batch.group(items)
        pending = {}
        queue = list(leaders)
        idle = list(self.actors)
        while queue or pending:
            while queue and idle:
                i = queue.pop(0)
                a = idle.pop()
                pending[a.evaluate.remote(items[i][0].to_dict(), items[i][1], fresh)] = (i, a)
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i, a = pending.pop(ref)
                idle.append(a)
                results[i] = EvalResult.from_dict(ray.get(ref))
                if progress is not None:
                    progress(i, results[i])
                if not batch.reusable(results[i]):  # a transient failure: its duplicates are judged each
                    queue += leaders.pop(i, [])
                    continue
                for d in leaders.get(i, []):
                    results[d] = batch.copy_for_duplicate(results[i], t0)
                    if progress is not None:
                        progress(d, results[d])
        return results  # type: ignore[return-value]

    def evaluate(self, task: Task, source: str, fresh: bool = False) -> EvalResult:
        return self.evaluate_many([(task, source)], fresh=fresh)[0]

    def close(self) -> None:
        for a in self.actors:
            try:
                self.ray.get(a.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - actor already gone
                pass
            self.ray.kill(a)
