"""The code policy's check of what a name is, not only how it is spelled.

Covers: walking a dotted name the candidate uses (one the spelling rules of policy.py
already allow) through the real modules of this process, and refusing
- a module reached under another name (``torch.cuda.tunable.mp`` is ``multiprocessing``,
  ``triton.language.core.ir`` is libtriton's);
- an object that *is* a refused one reached by another path (``torch.mtia.Stream`` is
  ``torch.Stream``);
- a class or function defined outside the allowed top-level modules (``torch.xpu.c_double``
  is ctypes') or inside a refused torch module (``torch.CompilationUnit`` is ``torch.jit``'s).
Only attribute lookups run here (a lazily loaded torch submodule may be imported), never a
call. Does not cover: values made at run time (policy.py refuses module names read on them),
or names this install lacks (they fail when the candidate runs).
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Optional

from .policy_tables import TORCH_ALLOWED_UNDER_DENIED, TORCH_DENY

# the allowlist's top-level modules walked here (``os`` names are an exact list already)
ROOTS = ("torch", "triton", "math", "typing")
_DEFINED_IN = ROOTS + ("builtins",)  # where their own functions and classes are defined
_MODULE_ALIASES: dict[str, tuple[str, ...]] = {}


def _walk(path: str):
    """The object ``path`` names in this process, or None (absent, or a lookup failed)."""
    parts = path.split(".")
    if parts[0] not in ROOTS:
        return None
    try:
        obj = importlib.import_module(parts[0])
        for seg in parts[1:]:
            obj = getattr(obj, seg)
    except Exception:  # noqa: BLE001 - a name this install lacks is the run's error, not ours
        return None
    return obj


@functools.lru_cache(maxsize=1)
def _refused() -> tuple[frozenset, tuple[str, ...]]:
    """(ids of refused non-module objects, module names under which everything is refused)."""
    ids, modules = set(), set(TORCH_DENY)
    for path in TORCH_DENY:
        obj = _walk(path)
        if obj is None:
            continue
        if inspect.ismodule(obj):
            modules.add(obj.__name__)
        elif inspect.isclass(obj) or inspect.isroutine(obj):
            ids.add(id(obj))
    return frozenset(ids), tuple(sorted(modules))


@functools.lru_cache(maxsize=4096)
def object_problem(path: str) -> Optional[tuple[str, str]]:
    """(rule, why) when what ``path`` names is refused, whatever its spelling; None otherwise."""
    parts = path.split(".")
    if parts[0] not in ROOTS or path in TORCH_ALLOWED_UNDER_DENIED:
        return None
    try:
        obj = importlib.import_module(parts[0])
    except Exception:  # noqa: BLE001
        return None
    written = parts[0]
    for seg in parts[1:]:
        try:
            obj = getattr(obj, seg)
        except Exception:  # noqa: BLE001
            return None
        written += "." + seg
        problem = _what_it_is(written, obj)
        if problem:
            return problem
    return None


def _what_it_is(written: str, obj) -> Optional[tuple[str, str]]:
    """The refusal of one object on a walked path (each step is checked: a refused class's
    method is reached through the class)."""
    if inspect.ismodule(obj):
        if obj.__name__ != written and obj.__name__ not in _MODULE_ALIASES.get(written, ()):
            return "reexport", f"'{written}' is the module '{obj.__name__}' under another name"
        return None
    ids, modules = _refused()
    if id(obj) in ids:
        return "torch", f"'{written}' is a refused torch name reached by another path"
    if inspect.isclass(obj) or inspect.isroutine(obj):
        mod = getattr(obj, "__module__", None) or ""
        if mod and mod.split(".")[0] not in _DEFINED_IN:
            return "reexport", f"'{written}' is defined in '{mod}', outside the allowed modules"
        for m in modules:
            if mod == m or mod.startswith(m + "."):
                return "torch", f"'{written}' belongs to '{m}', which is refused: {TORCH_DENY.get(m, 'refused')}"
    return None
