"""Rollouts sampled by a generation server (vLLM or SGLang) instead of the trainer's own loop.

Covers: ``ServerGenerator``, with ``LocalGenerator``'s ``generate(prompts, ...)`` (chat
messages are rendered to token ids with the trainer's tokenizer once; token-id prompts go
as they are; the sampled ids and the server's log-probs come back, and text is decoded only
for the environment to read, never re-encoded for training; a later turn's prompt continues
the earlier turns' ids, ``TurnIds``), ``ServerBackend`` (the same
behind the rollout pipeline's ``Backend`` interface), and ``connect_server`` (start the
server from ``rl.generator_python`` or reach ``rl.generator_url``, wait for health, check
the served model, that token-id prompts work and that its log-probs agree with the
trainer's on a probe). Every start-up failure is a one-line ``UsageError``.

Does not cover: the HTTP requests (``llm/server_client.py``), the process
(``llm/server_process.py``) or pushing new weights (``weight_sync.py``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from ..errors import UsageError
from ..llm.base import Backend, GenRequest
from ..llm.server_client import ServerClient, ServerError
from ..llm.server_process import ServerProcess, wait_healthy
from ..records import Completion
from .sequences import render_prompt

log = logging.getLogger("davinci_kernel.rl")

#: a probe whose mean |server − trainer| log-prob gap exceeds this stops the start-up
PROBE_MEAN_GAP = 0.05


class ServerGenerator:
    """``generate(prompts, ...)`` through a server; same arguments as ``LocalGenerator``."""

    def __init__(self, client: ServerClient, tokenizer, model=None, lora_name: Optional[str] = None):
        self.client = client
        self.tokenizer = tokenizer
        self.model = model  # the trainer's model (for callers that inspect it); never run here
        self.lora_name = lora_name
        self.name = f"{client.kind}:{client.url}"
        self.busy_s = 0.0
        self.turns = TurnIds(tokenizer)

    def prompt_ids(self, prompt) -> list[int]:
        if prompt and isinstance(prompt[0], int):
            return list(prompt)
        return self.turns.ids(prompt) or render_prompt(self.tokenizer, prompt)

    def generate(self, prompts: Sequence, max_new_tokens: int = 64, temperature: float = 1.0,
                 top_p: float = 1.0, stop_at_eos: bool = True, generator=None) -> list[Completion]:
        """prompts: chat message lists or token-id lists → one Completion each (``generator`` is
        accepted for the interface; the server draws its own randomness)."""
        import time

        ids = [self.prompt_ids(p) for p in prompts]
        if not ids:
            return []
        t0 = time.perf_counter()
        got = self.client.complete_ids(ids, max_new_tokens, temperature, top_p, ignore_eos=not stop_at_eos,
                                       lora=self.lora_name)
        self.busy_s += time.perf_counter() - t0
        for p, pid, s in zip(prompts, ids, got):
            if p and not isinstance(p[0], int):  # a chat prompt: its next turn continues these ids
                self.turns.remember(p, pid, s.token_ids)
        return [Completion(text=self.tokenizer.decode(s.token_ids, skip_special_tokens=True), token_ids=s.token_ids,
                           logprobs=s.logprobs, prompt_token_ids=p, model=self.name,
                           finish_reason="length" if s.finish_reason == "length" else "stop")
                for p, s in zip(ids, got)]

    def backend(self, max_batch: int = 64) -> ServerBackend:
        return ServerBackend(self, max_batch)


class TurnIds:
    """The token ids of earlier turns, so that a later turn's prompt continues them instead of
    re-encoding their decoded text: a chat prompt whose messages hold, as an assistant
    message, the very text of a completion this generator returned for the messages before it
    becomes ``earlier prompt ids + sampled ids + the rest encoded``. The rest is what the chat
    template renders after that reply (its end-of-turn marker, feedback, the next generation
    prompt). A prompt that matches no earlier turn (or whose rendering does not continue the
    earlier text) is encoded whole. Keeps the last ``limit`` turns."""

    def __init__(self, tokenizer, limit: int = 8192):
        from collections import OrderedDict

        self.tokenizer = tokenizer
        self.limit = limit
        self._seen: OrderedDict = OrderedDict()  # (messages key, reply text) → (prompt ids, sampled ids)
        self._lock = threading.Lock()  # the rollout backend calls from worker threads

    @staticmethod
    def _key(messages) -> str:
        import json

        return json.dumps(messages, sort_keys=True, default=str)

    def remember(self, messages, prompt_ids: list[int], sampled: list[int]) -> None:
        text = self.tokenizer.decode(sampled, skip_special_tokens=True)
        with self._lock:
            self._seen[(self._key(messages), text)] = (list(prompt_ids), list(sampled))
            while len(self._seen) > self.limit:
                self._seen.popitem(last=False)

    def ids(self, messages) -> Optional[list[int]]:
        """Prompt ids continuing the latest earlier turn found in ``messages``, or None."""
        for k in range(len(messages) - 1, 0, -1):
            m = messages[k]
            if not isinstance(m, dict) or m.get("role") != "assistant":
                continue
            with self._lock:
                hit = self._seen.get((self._key(messages[:k]), m.get("content")))
            if hit is None:
                continue
            prev_ids, sampled = hit
            tok = self.tokenizer
            head = tok.apply_chat_template(messages[:k], tokenize=False, add_generation_prompt=True)
            head += tok.decode(sampled, skip_special_tokens=False)
            full = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            if not full.startswith(head):
                return None
            rest = tok(full[len(head):], add_special_tokens=False)["input_ids"] if len(full) > len(head) else []
            return prev_ids + sampled + list(rest)
        return None


class ServerBackend(Backend):
    """The rollout pipeline's backend over a ``ServerGenerator``: requests grouped by
    sampling settings, ``max_batch`` prompts a request, in a worker thread; a refused batch
    is retried prompt by prompt, and a refused prompt becomes an error completion (the turn
    fails, as with any backend)."""

    gives_token_ids = True

    def __init__(self, gen: ServerGenerator, max_batch: int = 64):
        self.gen = gen
        self.max_batch = max(1, max_batch)
        self.name = gen.name

    @property
    def busy_s(self) -> float:
        return self.gen.busy_s

    async def _generate(self, requests: list[GenRequest]) -> list[Completion]:
        return await asyncio.to_thread(self._blocking, requests)

    def _blocking(self, requests: list[GenRequest]) -> list[Completion]:
        out: list[Optional[Completion]] = [None] * len(requests)
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(r.sampling_key(), []).append(i)
        for idx in groups.values():
            for start in range(0, len(idx), self.max_batch):
                chunk = idx[start:start + self.max_batch]
                r0 = requests[chunk[0]]
                for i, c in zip(chunk, self._request([requests[i].messages for i in chunk], r0)):
                    out[i] = c
        return out  # type: ignore[return-value]

    def _request(self, prompts: list, r0: GenRequest) -> list[Completion]:
        """One batched request; when the server refuses it, each prompt alone (so one prompt
        over the context length fails its own turn, not its batch's)."""
        try:
            return self.gen.generate(prompts, r0.max_new_tokens, r0.temperature, r0.top_p)
        except ServerError as e:
            if len(prompts) > 1:
                return [c for p in prompts for c in self._request([p], r0)]
            return [Completion(text="", finish_reason="error", model=self.name, error=f"server: {e}")]


@dataclass
class Connection:
    """A reachable server, and the process when this run started it."""

    client: ServerClient
    process: Optional[ServerProcess]

    def close(self) -> None:
        if self.process is not None:
            self.process.stop()


def serving_dtype(cfg) -> str:
    r = cfg.rl
    if r.generator_dtype != "auto":
        return r.generator_dtype
    return "bfloat16" if r.bf16 and torch.cuda.is_available() else "float32"


def connect_server(cfg, model_dir: Path, run_dir: Path, echo=None) -> Connection:
    """Start (``rl.generator_python``) or reach (``rl.generator_url``) the server, healthy,
    serving ``model_dir``; its dev or LoRA endpoints are checked by ``weight_sync``."""
    r = cfg.rl
    echo = echo or (lambda msg: None)
    served = _served_name(model_dir)
    if r.generator_url:
        url = r.generator_url.rstrip("/")
        if url.endswith("/v1"):
            url = url[:-3]
        wait_healthy(url, r.generator_timeout_s)
        client = ServerClient(r.generator, url)
        _check_model(client, model_dir)
        return Connection(client, None)
    proc = ServerProcess(r.generator, r.generator_python, model_dir, run_dir / "logs", served,
                         dtype=serving_dtype(cfg), max_model_len=_context_length(model_dir), lora_rank=r.lora_r,
                         extra=r.generator_args)
    echo(f"starting {r.generator} server on {proc.url} (log: {proc.log_path})")
    secs = proc.wait(r.generator_timeout_s)
    echo(f"{r.generator} server healthy after {secs:.0f} s")
    client = ServerClient(r.generator, proc.url, served)
    try:
        _check_model(client, model_dir)
    except BaseException:
        proc.stop()
        raise
    return Connection(client, proc)


def _context_length(model_dir: Path) -> int:
    """The model's own context length (``max_position_embeddings``), 4096 when it gives none."""
    import json

    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return int(cfg.get("max_position_embeddings") or 4096)


def _served_name(model_dir: Path) -> str:
    return f"dvk-{Path(model_dir).name}"


def _check_model(client: ServerClient, model_dir: Path) -> None:
    """The server serves ``model_dir`` (by path or by our served name); sets ``client.model``."""
    try:
        models = client.served_models()
    except ServerError as e:
        raise UsageError(f"the generation server at {client.url} did not list its models: {e}") from None
    want = {str(Path(model_dir).resolve()), str(model_dir), _served_name(model_dir)}
    for m in models:
        root = m["root"]
        if m["id"] in want or root in want or (root and Path(root).expanduser().resolve() == Path(model_dir).resolve()):
            client.model = m["id"]
            return
    names = ", ".join(f"{m['id']} ({m['root']})" for m in models) or "nothing"
    raise UsageError(f"the generation server at {client.url} serves {names}, not the trainer's model "
                     f"{model_dir}; start it with --model {model_dir}")


def probe_logprobs(gen: ServerGenerator, score, temperature: float, tokens: int = 16) -> dict:
    """Sample one short completion through the server and compare its log-probs with the
    trainer's (``score(prompt_ids, completion_ids) -> list[float]``); a server that rejects
    token-id prompts or whose log-probs disagree on average by more than ``PROBE_MEAN_GAP``
    is a ``UsageError`` (a server returning raw log-probs at temperature ≠ 1 shows as such).
    Returns {"mean_gap", "max_gap"}."""
    prompt = render_prompt(gen.tokenizer, [{"role": "user", "content": "Write ModelNew with a fast kernel."}])
    try:
        got = gen.client.complete_ids([prompt], tokens, temperature, 1.0, ignore_eos=True, lora=gen.lora_name)
    except ServerError as e:
        raise UsageError(f"the generation server rejects token-id prompts with log-probs: {e}") from None
    s = got[0]
    if not s.token_ids:
        raise UsageError("the generation server sampled no tokens on the start-up probe")
    mine = score(prompt, s.token_ids)
    gaps = [abs(a - b) for a, b in zip(s.logprobs, mine)]
    mean_gap, max_gap = sum(gaps) / len(gaps), max(gaps)
    if not math.isfinite(mean_gap) or mean_gap > PROBE_MEAN_GAP:
        raise UsageError(f"the generation server's log-probs differ from the trainer's by {mean_gap:.3f} nats per "
                         f"token on a start-up probe at temperature {temperature:g} (at most {PROBE_MEAN_GAP} "
                         "allowed): start vLLM with --logprobs-mode processed_logprobs, serve the trainer's "
                         "model in the dtype it scores in (rl.generator_dtype), or set rl.mismatch=off knowingly")
    return {"mean_gap": mean_gap, "max_gap": max_gap}
