"""Model specs: a string that names a backbone.

Covers: ``make_backend`` (a spec for generation → a backend: ``openai:URL#MODEL``, an
OpenAI-compatible server, ``#MODEL`` optional: the server's first model; ``hf:PATH``,
local transformers; ``script:FILE.py``, the scripted double) and ``resolve_model`` (a
spec for training → a local model folder: ``hf:PATH`` or a plain path used as is, or
``tiny[:key=value,...]``, built once under the run's folder by ``tiny.build_tiny``) and
``check_model`` (the same checks, nothing built: before a run folder is made;
``check_backend_spec`` is that for a generation spec). A
malformed spec is a one-line ``UsageError``. Does not cover: contacting the server; call
``await backend.check()`` for that.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..errors import UsageError
from .base import Backend

# the generation backends, each declared once: its spec and what it is (--model's help reads this)
BACKENDS = {"openai": ("openai:URL#MODEL", "vLLM, SGLang, an API"), "hf": ("hf:PATH", "local transformers"),
            "script": ("script:FILE.py", "replies from a file's respond(request): a dry run with no model")}
MODEL_HELP = " | ".join(f"{spec} ({what})" for spec, what in BACKENDS.values())
SPEC_HELP = ("use " + ", ".join(spec for spec, _ in BACKENDS.values())
             + " (e.g. openai:http://localhost:8000/v1#Qwen/Qwen3-8B)")


def check_backend_spec(spec: str) -> None:
    """What ``make_backend`` would refuse, found without importing or contacting anything: a
    malformed spec, an ``openai:`` URL without its scheme, a ``script:`` file or an ``hf:``
    folder that is not there (a command calls this before it creates its run folder)."""
    kind, sep, rest = (spec or "").partition(":")
    if not sep or not rest:
        raise UsageError(f"model spec '{spec}' not understood: {SPEC_HELP}")
    if kind == "openai":
        if not rest.partition("#")[0].startswith(("http://", "https://")):
            raise UsageError(f"model spec '{spec}': the URL must start with http:// or https://")
    elif kind == "script":
        if not Path(rest).expanduser().is_file():
            raise UsageError(f"script:{rest}: file not found (it must define respond(request) -> str)")
    elif kind == "hf":
        if not Path(rest).expanduser().exists():
            raise UsageError(f"model spec '{spec}': {Path(rest).expanduser()} not found (hf:PATH is a saved "
                             "transformers model folder)")
    if kind not in BACKENDS:
        raise UsageError(f"model spec '{spec}': unknown backend '{kind}'; {SPEC_HELP}")


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


def check_model(spec: str, field: str = "rl.model") -> None:
    """What ``resolve_model`` would refuse, found without building or loading anything: no
    spec, a malformed ``tiny:`` spec, a folder that is not there (a command calls this before
    it creates its run folder)."""
    if not spec:
        raise UsageError(f"no model given: set {field} to hf:PATH or tiny (e.g. {field}=tiny)")
    if spec == "tiny" or spec.startswith("tiny:"):
        from .tiny import parse_tiny_spec

        parse_tiny_spec(spec)
        return
    _local_dir(spec)


def _local_dir(spec: str) -> Path:
    path = spec[3:] if spec.startswith("hf:") else spec
    p = Path(path).expanduser()
    if not p.is_dir():
        raise UsageError(f"model '{spec}': directory {p} not found (use hf:PATH to a saved "
                         f"transformers model, or tiny for a smoke model)")
    return p


def resolve_model(spec: str, workdir: Optional[str | Path] = None) -> Path:
    """Model spec → local directory (building a tiny model under ``workdir`` when asked)."""
    check_model(spec, "rl.model (or sft.model)")
    if spec == "tiny" or spec.startswith("tiny:"):
        from .tiny import build_tiny, parse_tiny_spec

        opts = parse_tiny_spec(spec)
        name = "tiny-" + "-".join(f"{k}{v}" for k, v in opts.items())
        target = Path(workdir or ".") / name
        if not (target / "config.json").is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            build_tiny(target, **opts)
        return target
    return _local_dir(spec)
