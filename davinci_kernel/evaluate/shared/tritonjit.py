"""Which functions of a candidate's source are Triton kernels: the ``@triton.jit`` (or
``@triton.autotune`` / ``@triton.heuristics``) functions of its parsed AST, and the dotted
name of an attribute chain (``tl.math.exp`` → ``"tl.math.exp"``).

Covers only finding the kernels by their decorators, syntactically (the last name of the
decorator's chain, whatever module it was reached through). Does not cover what a kernel
does (``tritonlaunch.py`` interprets one launch) nor whether it may run (the harness's code
policy, ``harness/codepolicy``).
"""

from __future__ import annotations

import ast


def is_jit(dec: ast.AST) -> bool:
    """Whether a decorator makes a Triton kernel (``jit``, ``autotune``, ``heuristics``)."""
    target = dec.func if isinstance(dec, ast.Call) else dec
    name = dotted(target)
    return name.split(".")[-1] in ("jit", "autotune", "heuristics")


def dotted(node: ast.AST) -> str:
    """An attribute chain rooted at a name as a dotted string (``""`` for any other root)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))



def jit_functions(tree: ast.AST) -> dict[str, ast.FunctionDef]:
    """The Triton kernels of a parsed source by name (every nesting level; a later definition
    of a name wins)."""
    return {n.name: n for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef) and any(is_jit(d) for d in n.decorator_list)}
