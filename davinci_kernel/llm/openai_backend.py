"""Backend for any OpenAI-compatible chat server (vLLM, SGLang, a hosted API).

Covers: ``/v1/chat/completions`` calls with a concurrency limit, per-call timeouts and
the openai client's own retries (exponential backoff with jitter, ``Retry-After`` honoured)
on connection errors, timeouts, 408, 409, 429 and 5xx; asking
for generated-token log-probs (standard ``logprobs``) and, from servers that know them,
token ids through vLLM's extra request parameters (``return_token_ids`` gives
``prompt_token_ids`` and per-choice ``token_ids``; ``return_tokens_as_token_ids`` makes
log-prob entries read ``token_id:N``). A server that rejects those extras with a 400 is
asked again without them, once, and remembered (the one retry the client does not do). A
request that still fails after the client's retries becomes a ``Completion`` with
``error`` set; the run goes on. ``check`` asks once, without retries.

Does not cover: streaming, tool-call fields (agents parse tools from the text), or
starting a server (``serve`` has a small one for tests; production uses ``vllm serve``).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Optional

from ..errors import UsageError
from ..records import Completion
from .base import Backend, GenRequest

VLLM_EXTRAS = {"return_token_ids": True, "return_tokens_as_token_ids": True}


def _start_hint(url: str) -> str:
    return (f"no OpenAI-compatible server answers at {url}: start one with "
            f"`vllm serve MODEL --port PORT` (URL http://HOST:PORT/v1) or fix the URL")


class OpenAIBackend(Backend):
    """``openai:URL#MODEL``. ``token_ids``: "auto" asks for vLLM extras and falls back."""

    def __init__(self, base_url: str, model: str = "", *, api_key: Optional[str] = None,
                 concurrency: int = 64, timeout_s: float = 600.0, max_retries: int = 4,
                 token_ids: str = "auto", logprobs: bool = True):
        import openai

        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"openai:{self.base_url}#{model}" if model else f"openai:{self.base_url}"
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.want_logprobs = logprobs
        self.use_extras = token_ids in ("auto", "on", True)
        self.gives_token_ids = self.use_extras
        self.concurrency = max(1, concurrency)
        self._openai = openai
        self._key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self._loop = None
        self._client = None
        self._sem: Optional[asyncio.Semaphore] = None
        self.served_model: Optional[dict] = None  # the server's entry for the model (check() fills it)

    @property
    def client(self):
        return self._session()[0]

    def _session(self):
        """(client, semaphore) of the running event loop, made anew under a new loop, since
        connections and semaphores belong to the loop that made them."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._loop = loop
            self._client = self._openai.AsyncOpenAI(base_url=self.base_url, api_key=self._key,
                                                    timeout=self.timeout_s, max_retries=self.max_retries)
            self._sem = asyncio.Semaphore(self.concurrency)
        return self._client, self._sem

    # ------------------------------------------------------------------ reachability
    async def check(self) -> None:
        """Fail with one line when the server is down; learn the model name if not given."""
        try:
            client = self.client.with_options(max_retries=0)
            models = await client.models.list(timeout=min(self.timeout_s, 15.0))
        except (self._openai.APIConnectionError, self._openai.APITimeoutError):
            raise UsageError(_start_hint(self.base_url)) from None
        except self._openai.APIStatusError as e:
            if e.status_code in (401, 403):
                raise UsageError(f"{self.base_url} refused the API key (HTTP {e.status_code}): "
                                 "set OPENAI_API_KEY") from None
            raise UsageError(f"{self.base_url}/models answered HTTP {e.status_code}: "
                             "is this an OpenAI-compatible /v1 URL?") from None
        data = list(getattr(models, "data", []))
        ids = [m.id for m in data]
        if not self.model:
            if not ids:
                raise UsageError(f"{self.base_url} serves no model: give one as openai:URL#MODEL")
            self.model = ids[0]
            self.name = f"openai:{self.base_url}#{self.model}"
        elif ids and self.model not in ids:
            raise UsageError(f"{self.base_url} does not serve '{self.model}' "
                             f"(it serves: {', '.join(ids[:5])})")
        self.served_model = _served(data, self.model)

    async def aclose(self) -> None:
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.close()
        self._client = None

    # ------------------------------------------------------------------ generation
    async def _generate(self, requests: list[GenRequest]) -> list[Completion]:
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    async def _one(self, req: GenRequest) -> Completion:
        _, sem = self._session()
        async with sem:
            return await self._with_retries(req)

    async def _with_retries(self, req: GenRequest) -> Completion:
        """One request; the client retries transport errors, 408/409/429 and 5xx itself. Here
        only: a 400 about vLLM's extras is asked again without them (and remembered)."""
        oa = self._openai
        while True:
            try:
                return await self._call(req)
            except oa.BadRequestError as e:
                if self.use_extras and _mentions_extras(e):
                    self.use_extras = False
                    self.gives_token_ids = False
                    continue
                return self._failed(f"HTTP 400: {_short(e)}")
            except oa.APIStatusError as e:
                if e.status_code < 500 and e.status_code not in (408, 409, 429):
                    return self._failed(f"HTTP {e.status_code}: {_short(e)}")
                return self._failed(f"failed after {self.max_retries + 1} attempts: HTTP {e.status_code}: {_short(e)}")
            except (oa.APIConnectionError, oa.APITimeoutError) as e:
                return self._failed(f"failed after {self.max_retries + 1} attempts: {type(e).__name__}: {_short(e)}")

    def _failed(self, error: str) -> Completion:
        return Completion(text="", model=self.model, finish_reason="error", error=error)

    async def _call(self, req: GenRequest) -> Completion:
        kwargs: dict[str, Any] = dict(model=self.model, messages=req.messages,
                                      temperature=req.temperature, max_tokens=req.max_new_tokens)
        if req.temperature > 0:
            kwargs["top_p"] = req.top_p
        if req.seed is not None:
            kwargs["seed"] = req.seed
        if self.want_logprobs:
            kwargs["logprobs"] = True
        if self.use_extras:
            kwargs["extra_body"] = dict(VLLM_EXTRAS)
        resp = await self.client.chat.completions.create(**kwargs)
        return completion_from_response(resp.model_dump(), self.model)


def _served(models: list, model_id: str) -> dict:
    """The server's own entry for the model a run uses: its ``id`` and, where the server
    gives them (vLLM, SGLang), ``root`` (the weights it loaded), ``owned_by`` and
    ``max_model_len``."""
    out: dict[str, Any] = {"id": model_id}
    for m in models:
        if getattr(m, "id", None) != model_id:
            continue
        extra = getattr(m, "model_extra", None) or {}
        for key in ("root", "owned_by", "max_model_len", "created"):
            value = extra.get(key, getattr(m, key, None))
            if value is not None:
                out[key] = value
    return out


def completion_from_response(data: dict[str, Any], model: str = "") -> Completion:
    """A chat-completion response (as a dict) → ``Completion`` with whatever ids it carries."""
    choices = data.get("choices") or []
    if not choices:
        return Completion(text="", model=model, finish_reason="error", error="response had no choices")
    ch = choices[0]
    msg = ch.get("message") or {}
    text = msg.get("content") or ""
    reasoning = msg.get("reasoning_content") or msg.get("reasoning")
    if reasoning and "<think>" not in text:
        text = f"<think>{reasoning}</think>\n{text}"
    token_ids = ch.get("token_ids")
    logprobs = None
    content = (ch.get("logprobs") or {}).get("content") or None
    if content:
        logprobs = [float(e.get("logprob", 0.0)) for e in content]
        if token_ids is None:
            token_ids = _ids_from_logprob_tokens(content)
    prompt_ids = data.get("prompt_token_ids") or ch.get("prompt_token_ids")
    if token_ids is not None and logprobs is not None and len(token_ids) != len(logprobs):
        logprobs = None  # misaligned: do not hand the trainer wrong numbers
    return Completion(text=text, token_ids=list(token_ids) if token_ids is not None else None,
                      logprobs=logprobs, prompt_token_ids=list(prompt_ids) if prompt_ids else None,
                      finish_reason=ch.get("finish_reason") or "stop",
                      model=data.get("model") or model)


def _ids_from_logprob_tokens(content: list[dict]) -> Optional[list[int]]:
    ids = []
    for e in content:
        tok = e.get("token") or ""
        if not tok.startswith("token_id:"):
            return None
        try:
            ids.append(int(tok.split(":", 1)[1]))
        except ValueError:
            return None
    return ids


def _mentions_extras(err: Exception) -> bool:
    text = str(err).lower()
    return any(k in text for k in VLLM_EXTRAS) or "unrecognized" in text or "extra" in text


def _short(err: Exception, limit: int = 300) -> str:
    text = " ".join(str(err).split())
    return text[:limit]
