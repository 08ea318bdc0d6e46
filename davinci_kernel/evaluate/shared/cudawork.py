"""Whether a CUDA kernel of a ``load_inline`` source computes: each ``__global__`` body read
as text.

Covers ``cuda_computes``: arithmetic on a value read through a pointer parameter (outside
subscripts; also through locals, shared-memory tiles and pointers derived from the
parameters) is compute. Does not cover how much: the worker sees no grid, so a CUDA kernel's
work is not estimated (on a GPU the time coverage decides, and a CUDA kernel that only moves
data earns nothing where the reference computes). Does not parse C++: macros, templates and
device helpers are read only as far as these regular expressions reach.
"""

from __future__ import annotations

import re

_GLOBAL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?[\w:<>\s\*&]*?\b(\w+)\s*\(([^)]*)\)\s*\{")
_ARITH = re.compile(r"[-+*/%^|&]|<<|>>|\b(?:exp|expf|log|logf|sqrt|sqrtf|rsqrt|rsqrtf|fmax|fmaxf|fmin|fminf|tanh|"
                    r"tanhf|pow|powf|fabs|fabsf|max|min|abs|fma|fmaf|__(?!ld)\w+)\s*\(|[<>]=?|\?")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def cuda_computes(source: str) -> dict[str, bool]:
    """Each ``__global__`` kernel of a CUDA source → whether it does arithmetic on values it
    read through its pointer parameters (index arithmetic inside ``[...]`` does not count)."""
    out = {}
    for m in _GLOBAL.finditer(source):
        name, params = m.group(1), m.group(2)
        ptrs = {p.strip().split()[-1].lstrip("*&") for p in params.split(",") if "*" in p and p.strip()}
        body = _braced(source, m.end() - 1)
        out[name] = _body_computes(body, ptrs)
    return out


def _braced(s: str, start: int) -> str:
    depth = 0
    for i in range(start, len(s)):
        depth += {"{": 1, "}": -1}.get(s[i], 0)
        if depth == 0:
            return s[start + 1:i]
    return s[start + 1:]


def _strip_subscripts(stmt: str) -> str:
    out, depth = [], 0
    for ch in stmt:
        if ch == "[":
            depth += 1
            out.append("[")
        elif ch == "]":
            depth = max(0, depth - 1)
            out.append("]")
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _body_computes(body: str, ptrs: set) -> bool:
    body = re.sub(r"//[^\n]*|/\*.*?\*/", " ", body, flags=re.S)
    tainted = set(ptrs)  # names whose value came from memory (pointer parameters read by subscript)
    for _ in range(2):  # twice: a value read late may flow into an earlier loop's statement
        for raw in re.split(r"[;{}]", body):
            stmt = _strip_subscripts(raw)
            if "=" not in stmt or stmt.strip().startswith(("for", "if", "while")) and "=" not in stmt.split(")")[-1]:
                continue
            lhs, _, rhs = stmt.partition("=")
            if rhs.startswith("=") or lhs.endswith(("<", ">", "!")):
                continue
            if "*" in lhs.strip().lstrip("*"):  # a pointer declared from another: address arithmetic
                tainted.update(_IDENT.findall(lhs)[-1:])
                continue
            reads = {w for w in _IDENT.findall(rhs)} & tainted
            if not reads:
                continue
            expr = re.sub(r"([(,]\s*|^\s*)&(?=\s*\w)", r"\1", rhs.replace("[]", ""))  # address-of is no op
            if _ARITH.search(expr) or lhs.rstrip()[-1:] in "+-*/%^|&":
                return True
            target = _IDENT.findall(lhs)
            if target and "[" not in lhs:
                tainted.add(target[-1])
            elif target:  # a store into an array (shared memory, a local tile): its values came from memory
                tainted.add(lhs.split("[", 1)[0].split()[-1].lstrip("*&") if lhs.split("[", 1)[0].split() else target[0])
    return False

