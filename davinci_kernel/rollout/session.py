"""Opening what a rollout command needs: the backbone, the evaluator, the skill library.

Covers: ``open_session`` — builds the backend from its spec and checks it answers (an
unreachable server is one ``UsageError`` line), starts the evaluator's worker pool on the
chosen device, opens the library when skills are on (a new, empty one seeded with the bundled
skills unless ``seed_library`` is false, as ``--no-seed`` says) — and closes all of it afterwards.
``served_model`` and ``sandbox_of`` say what a run's
run.json records of them. Does not cover: what the session is used for (``suite``, ``optimize``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Optional

from ..config import EvalConfig, SkillsConfig
from ..llm import Backend, make_backend


@dataclass
class Session:
    backend: Backend
    evaluator: Any
    store: Any = None


def served_model(backend: Backend) -> Optional[dict]:
    """What the model server says it serves for this run (``id`` and, from vLLM, ``root``
    and ``max_model_len``), learned when the session checked it; None for local backends."""
    served = getattr(backend, "served_model", None)
    return dict(served) if served else None


def sandbox_of(evaluator: Any) -> str:
    """The evaluator's sandbox, as run.json's provenance records it."""
    return getattr(evaluator, "sandbox_description", None) or "unknown"


@asynccontextmanager
async def open_session(model: str, device: str = "auto", workers: Optional[int] = None,
                       skills_db: Optional[str] = None, use_skills: bool = True, seed_library: bool = True,
                       eval_cfg: Optional[EvalConfig] = None, backend: Optional[Backend] = None,
                       evaluator: Any = None) -> AsyncIterator[Session]:
    backend = backend or make_backend(model)
    await backend.check()
    store = None
    if use_skills:
        from ..skills.store import open_store

        cfg = SkillsConfig(seed_library=seed_library)
        if skills_db:
            cfg.db = skills_db
        store = open_store(cfg)
    own_eval = evaluator is None
    if own_eval:
        from ..evaluate import Evaluator

        cfg = eval_cfg or EvalConfig()
        cfg.device = device
        evaluator = Evaluator(cfg, workers=workers)
    try:
        yield Session(backend, evaluator, store)
    finally:
        if own_eval:
            evaluator.close()
        if store is not None:
            store.close()
        await backend.aclose()
