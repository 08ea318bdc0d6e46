"""A scripted backbone: replies come from a Python function, for tests and dry runs.

Covers: ``ScriptedBackend(respond)`` where ``respond(request) -> str`` (or a
``Completion``) decides each reply, so a test can play every agent (selection tool call,
policy kernels, summary tool call) and fail on purpose (an exception becomes a
``Completion`` with ``error``, as a dead server would); ``script:FILE.py`` loads a file
that defines ``respond``. Does not cover: token ids or log-probs (it has no model), so
it never feeds the trainer.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Union

from ..errors import UsageError
from ..records import Completion
from .base import Backend, GenRequest

Responder = Callable[[GenRequest], Union[str, Completion]]


class ScriptedBackend(Backend):
    def __init__(self, respond: Responder, name: str = "scripted", delay_s: float = 0.0):
        self.respond = respond
        self.name = name
        self.delay_s = delay_s
        self.calls: list[GenRequest] = []

    async def _generate(self, requests: list[GenRequest]) -> list[Completion]:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        out = []
        for r in requests:
            self.calls.append(r)
            try:
                reply = self.respond(r)
            except Exception as e:  # noqa: BLE001 - the double's way to play a failing server
                out.append(Completion(text="", finish_reason="error", model=self.name,
                                      error=f"{type(e).__name__}: {e}"))
                continue
            out.append(reply if isinstance(reply, Completion) else
                       Completion(text=str(reply), model=self.name))
        return out


def load_script(path: str) -> ScriptedBackend:
    """``script:FILE.py`` → a backend calling the file's ``respond(request)``."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise UsageError(f"script:{path}: file not found (it must define respond(request) -> str)")
    spec = importlib.util.spec_from_file_location(f"dvk_script_{p.stem}", p)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    fn = getattr(mod, "respond", None)
    if not callable(fn):
        raise UsageError(f"script:{path}: defines no respond(request) function")
    return ScriptedBackend(fn, name=f"script:{p}")
