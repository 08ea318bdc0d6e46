"""Where the trainer's task groups come from, behind one small interface.

Covers: the ``Env`` contract the trainer relies on (training / validation tasks,
``collect(tasks, generator, step) -> list[TaskGroup]``, staged-skill commit after a
successful update, skill-library snapshot and restore for checkpoints, environment
metrics), ``make_env(cfg)`` choosing between the synthetic environment
(``synthetic.py``) and the real pipeline (``RolloutEnv``: rollout + evaluator + skill
store), and the latter's adapter. Does not cover: the rollout itself (``rollout/``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ..errors import UsageError
from ..records import EvalResult, Task, TaskGroup


class Env(Protocol):
    name: str

    def train_tasks(self) -> list[Task]: ...

    def val_tasks(self) -> list[Task]: ...

    def collect(self, tasks: list[Task], generator, step: int) -> list[TaskGroup]: ...

    def staged(self) -> list[Any]:
        """Picklable skills staged by the last ``collect``; read after each ``collect`` of a step
        (dynamic sampling collects more than once)."""

    def commit(self, staged: list[Any], step: int, write: bool) -> int:
        """Admit ``staged`` (what every ``staged()`` of the step returned, in order, gathered
        across ranks) after a successful update; ``write`` is true on one rank only."""

    def discard(self) -> None: ...

    def snapshot(self, step: int) -> dict: ...

    def restore(self, info: dict) -> None: ...

    def metrics(self, groups: list[TaskGroup]) -> dict[str, tuple[float, float]]:
        """name → (sum, count), averaged over all ranks by the trainer."""

    def validate(self, generator, step: int) -> list[EvalResult]: ...


def make_env(cfg, workdir: Path) -> Env:
    if cfg.rl.env == "synthetic":
        from .synthetic import SyntheticEnv

        return SyntheticEnv(cfg)
    return RolloutEnv(cfg, workdir)


class RolloutEnv:
    """The real pipeline: built-in / KernelBench tasks, the sandboxed evaluator, the skill
    store, and ``davinci_kernel.rollout.collect_groups`` driving the three agents on an
    in-process backend that samples from the trainer's model object (``LocalBackend``), or
    on a generation server's backend (``server_gen.ServerBackend``) when the trainer has one."""

    name = "rollout"

    def __init__(self, cfg, workdir: Path, evaluator=None):
        """``evaluator``: one to share (anything with ``evaluate_many``); default: its own."""
        try:
            from ..rollout import collect_groups  # noqa: F401
        except ImportError:
            raise UsageError("rl.env=rollout needs davinci_kernel.rollout.collect_groups, which this build "
                             "lacks; use rl.env=synthetic for a smoke run") from None
        from ..evaluate import Evaluator
        from ..skills.admit import Admission
        from ..skills.store import open_store
        from ..tasks.loader import load_suite

        self.cfg = cfg
        self.tasks = load_suite(cfg.rl.suite)
        self.val = load_suite(cfg.rl.val_suite) if cfg.rl.val_suite else []
        self.evaluator = evaluator if evaluator is not None else Evaluator(cfg.eval)
        self.store = open_store(cfg.skills)
        self.admission = Admission()
        self._last_backend = None
        self._busy = (0, 0.0)  # (step, seconds its collections spent sampling)

    def train_tasks(self) -> list[Task]:
        return self.tasks

    def val_tasks(self) -> list[Task]:
        return self.val

    def _backend(self, generator):
        import torch

        if hasattr(generator, "backend"):  # a generation server (rl.generator=vllm | sglang): token ids in and out
            return generator.backend(max_batch=self.cfg.rollout.gen_batch)

        from .local_gen import LocalBackend
        from .modeling import mixed_precision

        # float32 master weights train under bf16 autocast: sample the same way
        fp32 = next(generator.model.parameters()).dtype == torch.float32
        cast = torch.bfloat16 if fp32 and mixed_precision(self.cfg.rl.bf16) == "bf16" else None
        # a batch size that ran out of memory in an earlier step is not tried again
        cap = self.cfg.rollout.gen_batch
        if self._last_backend is not None:
            cap = min(cap, self._last_backend.max_batch)
        return LocalBackend(generator.model, generator.tokenizer, max_batch=cap, autocast=cast)

    def collect(self, tasks, generator, step):
        from ..rollout import collect_groups

        b = self._last_backend = self._backend(generator)
        before = b.busy_s  # a server's backend counts over the run
        groups = collect_groups(tasks, backend=b, store=self.store, evaluator=self.evaluator,
                                admission=self.admission, cfg=self.cfg, step=step)
        so_far = self._busy[1] if self._busy[0] == step else 0.0  # dynamic sampling collects more than once
        self._busy = (step, so_far + b.busy_s - before)
        return groups

    def staged(self):
        return list(self.admission.staged.items())

    def commit(self, staged, step, write):
        self.admission.staged = dict(staged)  # a task staged by several collections: the last (in one process, its best)
        if not write:
            self.admission.discard()
            return 0
        return len(self.admission.commit(self.store, step))

    def discard(self):
        self.admission.discard()

    def snapshot(self, step):
        return {"db": str(self.store.path), "step": step, "n_skills": self.store.snapshot(step)}

    def restore(self, info):
        if info and "step" in info:
            self.store.rollback(int(info["step"]))

    def metrics(self, groups):
        """``sample_s``: of the step's generation time, the seconds the model spent sampling
        (the rest went to evaluation and waiting on it); the mean over ranks."""
        return {"sample_s": (self._busy[1], 1.0)} if self._last_backend is not None else {}

    def validate(self, generator, step):
        from ..rollout import validate_tasks

        return validate_tasks(self.val, backend=self._backend(generator), store=self.store,
                              evaluator=self.evaluator, cfg=self.cfg, step=step)
