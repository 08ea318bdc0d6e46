"""HTTP calls to a running vLLM or SGLang server: token ids in, sampled ids and log-probs out,
and the endpoints that swap weights in place.

Covers: ``ServerClient`` for both engines over plain ``urllib`` (JSON bodies):
- ``served_models()``; ``complete_ids(prompts, ...)``: one batched request of token-id
  prompts (vLLM ``/v1/completions`` with ``return_token_ids`` and ``logprobs: 0``; SGLang
  ``/generate`` with ``input_ids`` and ``return_logprob``) → ``Sampled`` per prompt;
- vLLM's development endpoints ``/pause``, ``/resume``, ``/reset_prefix_cache`` and
  ``/collective_rpc`` (``reload_weights`` from a folder), its LoRA hot-load
  ``/v1/load_lora_adapter``; SGLang's ``/update_weights_from_disk`` (cache flushed).
An endpoint the server lacks raises ``MissingEndpoint``; any other failure ``ServerError``,
each with one line that says what failed.

Does not cover: starting the server (``server_process.py``), the order of a sync or what
the trainer does with a failure (``rl/weight_sync.py``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Optional


class ServerError(RuntimeError):
    """A request to the generation server failed (one line: what and why)."""


class MissingEndpoint(ServerError):
    """The server has no such endpoint (404/405): not started with what the call needs."""


@dataclass
class Sampled:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str


class ServerClient:
    def __init__(self, kind: str, url: str, model: str = "", timeout_s: float = 600.0):
        self.kind = kind
        self.url = url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s

    # ------------------------------------------------------------------ transport
    def _call(self, method: str, path: str, body: Optional[dict] = None, timeout: Optional[float] = None) -> Any:
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout_s) as r:  # noqa: S310
                raw = r.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode(errors="replace").replace("\n", " ")
            cls = MissingEndpoint if e.code in (404, 405) else ServerError
            raise cls(f"{method} {path}: HTTP {e.code}: {detail}") from None
        except (OSError, urllib.error.URLError) as e:
            raise ServerError(f"{method} {path}: {self.url} unreachable: {e}") from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    # ------------------------------------------------------------------ models
    def served_models(self) -> list[dict]:
        """``[{"id", "root"}, ...]`` of what the server serves."""
        if self.kind == "sglang":
            info = self._call("GET", "/get_model_info", timeout=30)
            return [{"id": info.get("served_model_name") or info.get("model_path", ""),
                     "root": info.get("model_path", "")}]
        data = self._call("GET", "/v1/models", timeout=30)
        return [{"id": m.get("id", ""), "root": m.get("root") or ""} for m in data.get("data", [])]

    # ------------------------------------------------------------------ sampling
    def complete_ids(self, prompts: list[list[int]], max_new_tokens: int, temperature: float = 1.0,
                     top_p: float = 1.0, ignore_eos: bool = False, lora: Optional[str] = None) -> list[Sampled]:
        if not prompts:
            return []
        if self.kind == "sglang":
            return self._sglang_generate(prompts, max_new_tokens, temperature, top_p, ignore_eos)
        body = {"model": lora or self.model, "prompt": [list(map(int, p)) for p in prompts],
                "max_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p, "n": 1,
                "logprobs": 0, "return_token_ids": True, "ignore_eos": ignore_eos, "top_k": -1}
        data = self._call("POST", "/v1/completions", body)
        choices = sorted(data.get("choices", []), key=lambda c: c.get("index", 0))
        if len(choices) != len(prompts):
            raise ServerError(f"/v1/completions: {len(choices)} choices for {len(prompts)} prompts")
        out = []
        for c in choices:
            ids = c.get("token_ids")
            lp = (c.get("logprobs") or {}).get("token_logprobs")
            if ids is None or lp is None:
                raise ServerError("/v1/completions returned no token_ids or log-probs for a token-id prompt "
                                  "(vLLM 0.10.2 or newer returns them with return_token_ids and logprobs=0)")
            out.append(Sampled([int(t) for t in ids], [float(x) for x in lp], c.get("finish_reason") or "stop"))
        return out

    def _sglang_generate(self, prompts, max_new_tokens, temperature, top_p, ignore_eos) -> list[Sampled]:
        body = {"input_ids": [list(map(int, p)) for p in prompts], "return_logprob": True,
                "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature,
                                    "top_p": top_p, "ignore_eos": ignore_eos}}
        data = self._call("POST", "/generate", body)
        items = data if isinstance(data, list) else [data]
        if len(items) != len(prompts):
            raise ServerError(f"/generate: {len(items)} results for {len(prompts)} prompts")
        out = []
        for it in items:
            meta = it.get("meta_info", {})
            rows = meta.get("output_token_logprobs")
            if rows is None:
                raise ServerError("/generate returned no output_token_logprobs (return_logprob was asked)")
            ids = it.get("output_ids") or [int(r[1]) for r in rows]
            fin = meta.get("finish_reason") or {}
            out.append(Sampled([int(t) for t in ids], [float(r[0]) for r in rows],
                               fin.get("type", "stop") if isinstance(fin, dict) else str(fin)))
        return out

    # ------------------------------------------------------------------ weights (vLLM)
    def pause(self) -> None:
        self._call("POST", "/pause?mode=wait&clear_cache=true", timeout=120)

    def resume(self) -> None:
        self._call("POST", "/resume", timeout=120)

    def reset_prefix_cache(self) -> None:
        data = self._call("POST", "/reset_prefix_cache", timeout=120)
        if isinstance(data, dict) and data.get("success") is False:
            raise ServerError("/reset_prefix_cache answered success=false")

    def reload_weights(self, folder: str) -> None:
        self._call("POST", "/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": folder},
                                               "timeout": self.timeout_s}, timeout=self.timeout_s + 30)

    def load_lora(self, name: str, folder: str) -> None:
        self._call("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": folder, "load_inplace": True},
                   timeout=self.timeout_s)

    def has_dev_endpoints(self) -> bool:
        """True when ``/collective_rpc`` exists (a vLLM started with ``VLLM_SERVER_DEV_MODE=1``)."""
        try:
            self._call("POST", "/collective_rpc", {}, timeout=30)  # no method: refused before the engine
        except MissingEndpoint:
            return False
        except ServerError:
            return True  # present; the probe method itself is unknown
        return True

    # ------------------------------------------------------------------ weights (SGLang)
    def update_weights_from_disk(self, folder: str, version: int) -> None:
        data = self._call("POST", "/update_weights_from_disk",
                          {"model_path": folder, "flush_cache": True, "weight_version": str(version)},
                          timeout=self.timeout_s)
        if isinstance(data, dict) and data.get("success") is False:
            raise ServerError(f"/update_weights_from_disk: {data.get('message', 'success=false')}")
