"""Turning a model spec string into a backend.

Covers: ``openai:URL#MODEL`` (an OpenAI-compatible server; ``#MODEL`` optional: the
server's first model), ``hf:PATH`` (local transformers), ``script:FILE.py`` (the scripted
double). A malformed spec is a one-line ``UsageError``. Does not cover: contacting the
server; call ``await backend.check()`` for that.
"""

from __future__ import annotations

from ..errors import UsageError
from .base import Backend

SPEC_HELP = "use openai:URL#MODEL (e.g. openai:http://localhost:8000/v1#Qwen/Qwen3-8B), hf:PATH or script:FILE.py"


def make_backend(spec: str, **kwargs) -> Backend:
    kind, sep, rest = (spec or "").partition(":")
    if not sep or not rest:
        raise UsageError(f"model spec '{spec}' not understood: {SPEC_HELP}")
    if kind == "openai":
        url, _, model = rest.partition("#")
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"model spec '{spec}': the URL must start with http:// or https://")
        from .openai_backend import OpenAIBackend

        return OpenAIBackend(url, model, **kwargs)
    if kind == "hf":
        from .hf_backend import HFBackend

        return HFBackend(rest, **kwargs)
    if kind == "script":
        from .scripted import load_script

        return load_script(rest)
    raise UsageError(f"model spec '{spec}': unknown backend '{kind}'; {SPEC_HELP}")
