"""The backbone interface every model backend implements.

Covers: ``GenRequest`` (one chat prompt plus its sampling settings), the abstract
``Backend`` with a batched async ``generate(requests) -> list[Completion]`` (one
completion per request, in order, never raising for a failed request: the failure is
recorded in ``Completion.error``), and a synchronous helper for callers outside an
event loop. Does not cover: how a backend talks to its model (see ``openai_backend``,
``hf_backend``, ``scripted``) or choosing a backend from a spec (``spec``).
"""

from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass, field
from typing import Any, Optional

from ..records import Completion


@dataclass
class GenRequest:
    """One chat prompt to complete. ``temperature == 0`` means greedy decoding."""

    messages: list[dict[str, Any]]
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 4096
    seed: Optional[int] = None
    tags: dict[str, Any] = field(default_factory=dict)  # caller's bookkeeping, not sent

    def sampling_key(self) -> tuple:
        return (round(self.temperature, 6), round(self.top_p, 6), self.max_new_tokens)


class Backend(abc.ABC):
    """A model that completes chat prompts. Subclasses implement ``_generate``."""

    name: str = "backend"
    #: whether completions carry token ids and log-probs
    gives_token_ids: bool = False

    async def generate(self, requests: list[GenRequest]) -> list[Completion]:
        if not requests:
            return []
        out = await self._generate(list(requests))
        if len(out) != len(requests):  # our bug, never the model's
            raise RuntimeError(f"{self.name}: {len(out)} completions for {len(requests)} requests")
        return out

    @abc.abstractmethod
    async def _generate(self, requests: list[GenRequest]) -> list[Completion]:
        """One completion per request, in order."""

    async def check(self) -> None:  # noqa: B027 - a hook; backends with nothing to reach keep it empty
        """Raise ``UsageError`` with the fix when the model cannot be reached."""

    async def aclose(self) -> None:  # noqa: B027 - a hook; backends holding nothing keep it empty
        """Release connections or memory; the backend is unusable afterwards."""

    def generate_sync(self, requests: list[GenRequest]) -> list[Completion]:
        return asyncio.run(self.generate(requests))

    def describe(self) -> str:
        return self.name
