"""A small OpenAI-compatible HTTP server over a local transformers model.

Covers: ``GET /v1/models`` and non-streaming ``POST /v1/chat/completions`` with
``temperature``, ``top_p``, ``max_tokens``, ``n``, ``seed``, ``logprobs`` and the vLLM
extras ``return_token_ids`` / ``return_tokens_as_token_ids`` — enough to run the
``openai:`` backend end to end without vLLM (tests, CPU smoke runs). ``--strict``
rejects parameters a hosted API would not know (HTTP 400), ``--fail-first N`` answers
the first N chat calls with HTTP 503, so clients' fallbacks and retries can be tested.

Does not cover: streaming, tools, auth, throughput. For real work use ``vllm serve``.

    python -m davinci_kernel.llm.serve --model DIR [--host 127.0.0.1] [--port 0]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .base import GenRequest
from .hf_backend import HFBackend

_KNOWN = {"model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens",
          "n", "seed", "logprobs", "top_logprobs", "stream", "stop"}
_VLLM = {"return_token_ids", "return_tokens_as_token_ids"}


class _State:
    def __init__(self, backend: HFBackend, model_id: str, strict: bool, fail_first: int):
        self.backend = backend
        self.model_id = model_id
        self.strict = strict
        self.fail_left = fail_first
        self.lock = threading.Lock()


def _choice(index: int, comp, want_lp: bool, ids_as_tokens: bool, want_ids: bool, tok) -> dict:
    ch: dict = {"index": index, "message": {"role": "assistant", "content": comp.text},
                "finish_reason": comp.finish_reason}
    if want_lp and comp.logprobs is not None:
        entries = []
        for t, lp in zip(comp.token_ids, comp.logprobs):
            name = f"token_id:{t}" if ids_as_tokens else tok.decode([t])
            entries.append({"token": name, "logprob": lp, "bytes": None, "top_logprobs": []})
        ch["logprobs"] = {"content": entries}
    else:
        ch["logprobs"] = None
    if want_ids:
        ch["token_ids"] = comp.token_ids
    return ch


def make_handler(state: _State):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def _send(self, code: int, body: dict):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, code: int, msg: str):
            self._send(code, {"error": {"message": msg, "type": "invalid_request_error", "code": code}})

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [
                    {"id": state.model_id, "object": "model", "created": 0, "owned_by": "davinci-kernel"}]})
            else:
                self._error(404, f"no route {self.path}")

        def do_POST(self):
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._error(404, f"no route {self.path}")
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            except json.JSONDecodeError:
                return self._error(400, "body is not JSON")
            unknown = set(body) - _KNOWN - (set() if state.strict else _VLLM)
            if state.strict and unknown:
                return self._error(400, f"Unrecognized request argument supplied: {sorted(unknown)[0]}")
            with state.lock:
                if state.fail_left > 0:
                    state.fail_left -= 1
                    return self._error(503, "server warming up")
            if body.get("stream"):
                return self._error(400, "streaming is not supported by this server")
            if body.get("model") not in (None, state.model_id):
                return self._error(404, f"model {body.get('model')} not found")
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                return self._error(400, "messages must be a non-empty list")
            n = int(body.get("n") or 1)
            req = GenRequest(messages=msgs, temperature=float(body.get("temperature", 1.0)),
                             top_p=float(body.get("top_p", 1.0)),
                             max_new_tokens=int(body.get("max_tokens") or body.get("max_completion_tokens") or 256),
                             seed=body.get("seed"))
            comps = state.backend.generate_blocking([req] * n)
            failed = [c.error for c in comps if c.error]
            if failed:
                return self._error(500, failed[0])
            tok = state.backend.tokenizer
            choices = [_choice(i, c, bool(body.get("logprobs")), bool(body.get("return_tokens_as_token_ids")),
                               bool(body.get("return_token_ids")), tok) for i, c in enumerate(comps)]
            prompt_ids = comps[0].prompt_token_ids or []
            out = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
                   "created": int(time.time()), "model": state.model_id, "choices": choices,
                   "usage": {"prompt_tokens": len(prompt_ids),
                             "completion_tokens": sum(len(c.token_ids or []) for c in comps),
                             "total_tokens": len(prompt_ids) + sum(len(c.token_ids or []) for c in comps)}}
            if body.get("return_token_ids"):
                out["prompt_token_ids"] = prompt_ids
            self._send(200, out)

    return Handler


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="local model directory")
    ap.add_argument("--name", default=None, help="model id to serve under (default: the directory name)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--strict", action="store_true", help="reject vLLM-only parameters with HTTP 400")
    ap.add_argument("--fail-first", type=int, default=0, help="answer the first N chat calls with 503")
    args = ap.parse_args(argv)
    backend = HFBackend(args.model)
    from pathlib import Path

    state = _State(backend, args.name or Path(args.model).name, args.strict, args.fail_first)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    host, port = server.server_address[:2]
    print(f"listening on http://{host}:{port}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
