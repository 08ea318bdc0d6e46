"""Parsing Python source to an AST, one thread at a time.

Covers: ``parse``, the package's only way to call ``ast.parse``. CPython 3.11's AST
constructor keeps its recursion depth in shared state, so two threads building ASTs at once
(evaluation threads judging candidates while rollout threads read model replies) can fail
with ``SystemError: AST constructor recursion depth mismatch``; one lock makes them take
turns (a parse takes microseconds to milliseconds). Does not cover: what callers do with the
tree.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, mode: str = "exec") -> ast.AST:
    with _LOCK:
        return ast.parse(source, mode=mode)
