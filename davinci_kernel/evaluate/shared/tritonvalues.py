"""The abstract values a Triton launch is interpreted over (``tritonlaunch.py``) and the
arithmetic on them that needs no interpreter: a value's shape, known constant, whether it
holds data read from memory or an address, the ops that made it, which tensor parameters it
points into or was read from, the loop depth at which it varies, and the affine map (``a·x +
b`` with invariant coefficients) that links it to an earlier value; broadcasting, element
counts, constant folding, and which ops are identities (``x * 1``, ``x + 0``: no work).

Does not cover how statements, calls or launches are interpreted (``tritonlaunch.py``).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Optional


@dataclass
class V:
    """An abstract value: a tensor's shape (``()`` a scalar, None unknown), a known Python
    value, whether it holds data read from memory (``data``: 1 loaded, 2 computed from
    loaded values), whether it is an address, and the ops (id → work) that made it.

    ``bases``: the tensor parameters an address points into; ``src``: the tensor parameters
    whose loaded data the value (or an address) was computed from. ``born``: the trip
    product of the loops in which the value varies (0: the same in every iteration), so an op
    on values that do not vary in a loop counts once, not once per trip. ``aff``: the value is
    ``a·root + b`` with ``a``, ``b`` invariant (numbers where known, else None): ``(root, a,
    b, kinds, coefficient ops, born of the chain)``; a chain of such ops costs at most a
    multiply and an add per element, and one that composes to the identity costs nothing.
    ``rng``: (least, greatest) an index value can take (program ids, aranges, loop
    variables and integer arithmetic on them), None where not known. ``term``: the value's
    id as an opaque term of ``poly`` forms (0: none given yet); ``poly``: the value as a
    polynomial over such terms (``Poly``), None where not followed. ``spread``: how many
    distinct values it holds where fewer than its elements (a loaded scalar broadcast over
    a block: 1), None where each element may differ."""
    shape: Optional[tuple] = ()
    const: object = None
    data: int = 0
    ptr: bool = False
    ops: dict = field(default_factory=dict)
    bases: frozenset = frozenset()
    src: frozenset = frozenset()
    born: float = 0.0
    aff: Optional[tuple] = None
    rng: Optional[tuple] = None
    term: int = 0
    poly: Optional[dict] = None
    spread: Optional[int] = None


# A polynomial over opaque terms: {monomial: coefficient}, a monomial a sorted tuple of (term,
# power) pairs (powers may be negative), ``()`` the constant. Arithmetic on loaded values is
# followed in this form so that what cancels is seen to cancel: ``(y + s) - s`` is ``y``,
# ``y * t / t`` is ``y``, ``s - s`` is 0, whatever ``s`` was loaded from.
POLY_TERMS = 16  # monomials followed in one value; a larger one is opaque
_CANCEL = 1e-9  # coefficients that sum to this share of the larger are exactly opposite


def poly_add(p: dict, q: dict, sign: float = 1.0) -> Optional[dict]:
    """``p + sign * q`` (None where it has more than ``POLY_TERMS`` monomials)."""
    out = dict(p)
    for m, c in q.items():
        c = sign * c
        if m in out:
            s = out[m] + c
            if abs(s) <= _CANCEL * max(abs(out[m]), abs(c)):
                del out[m]
            else:
                out[m] = s
        else:
            out[m] = c
    return out if len(out) <= POLY_TERMS else None


def _mono_mul(m: tuple, n: tuple, sign: int = 1) -> tuple:
    powers = dict(m)
    for t, k in n:
        powers[t] = powers.get(t, 0) + sign * k
    return tuple(sorted((t, k) for t, k in powers.items() if k != 0))


def poly_mul(p: dict, q: dict) -> Optional[dict]:
    """``p * q`` distributed (None where too large)."""
    if len(p) * len(q) > POLY_TERMS * 4:
        return None
    out: dict = {}
    for m, c in p.items():
        for n, d in q.items():
            out = poly_add(out, {_mono_mul(m, n): c * d}) or {}
    return out if len(out) <= POLY_TERMS else None


def poly_div(p: dict, q: dict) -> Optional[dict]:
    """``p / q`` where ``q`` is one monomial with a coefficient other than 0 (None otherwise)."""
    if len(q) != 1:
        return None
    (n, d), = q.items()
    if d == 0:
        return None
    return {_mono_mul(m, n, -1): c / d for m, c in p.items()}


def poly_single(p: dict) -> Optional[int]:
    """The term ``p`` is, alone with coefficient 1 (None otherwise)."""
    if len(p) != 1:
        return None
    (m, c), = p.items()
    if len(m) == 1 and m[0][1] == 1 and abs(c - 1.0) <= _CANCEL:
        return m[0][0]
    return None


def poly_constant(p: dict) -> Optional[float]:
    """The number ``p`` is where it holds no term (0 where empty)."""
    if not p:
        return 0.0
    if len(p) == 1 and () in p:
        return p[()]
    return None


def poly_key(p: dict) -> tuple:
    return tuple(sorted(p.items()))


def spread(v: V) -> int:
    """The distinct values ``v`` holds: a number's 1, a broadcast's what it was spread from,
    else its elements."""
    if not v.data and not v.ptr and v.const is not None:
        return 1
    n = numel(v.shape)
    return n if v.spread is None else max(1, min(v.spread, n))


def value_range(v: V) -> Optional[tuple]:
    """(least, greatest) an index value takes: a known integer, or its ``rng``."""
    if v.ptr or v.data:
        return None
    if isinstance(v.const, int) and not isinstance(v.const, bool):
        return v.const, v.const
    return v.rng


def range_arith(op, a: Optional[tuple], b: Optional[tuple]) -> Optional[tuple]:
    """The range of ``a op b`` over integer ranges (None where not followed)."""
    if a is None or b is None:
        return None
    if isinstance(op, (ast.Add, ast.Sub, ast.Mult)):
        f = {ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y, ast.Mult: lambda x, y: x * y}[type(op)]
        c = [f(x, y) for x in a for y in b]
        return min(c), max(c)
    if isinstance(op, ast.FloorDiv) and b[0] == b[1] and b[0] > 0:
        return a[0] // b[0], a[1] // b[0]
    if isinstance(op, ast.Mod) and b[0] == b[1] and b[0] > 0 and a[0] >= 0:
        return (a[0], a[1]) if a[1] < b[0] else (0, b[0] - 1)
    return None


def range_compare(op, a: Optional[tuple], b: Optional[tuple]) -> Optional[bool]:
    """Whether ``a op b`` holds for every value of the ranges (True), for none (False), or
    either (None)."""
    if a is None or b is None:
        return None
    (alo, ahi), (blo, bhi) = a, b
    tests = {ast.Lt: (ahi < blo, alo >= bhi), ast.LtE: (ahi <= blo, alo > bhi), ast.Gt: (alo > bhi, ahi <= blo),
             ast.GtE: (alo >= bhi, ahi < blo), ast.Eq: (alo == ahi == blo == bhi, ahi < blo or alo > bhi),
             ast.NotEq: (ahi < blo or alo > bhi, alo == ahi == blo == bhi)}.get(type(op))
    if tests is None:
        return None
    return True if tests[0] else False if tests[1] else None


def numel(shape) -> int:
    """Elements of a shape (its known positive dimensions; 1 for a scalar or unknown shape)."""
    return math.prod(d for d in shape if isinstance(d, int) and d > 0) if shape else 1


def bcast(*shapes):
    """The broadcast of shapes (None where any is unknown)."""
    if any(s is None for s in shapes):
        return None
    out: list = []
    for i in range(1, max((len(s) for s in shapes), default=0) + 1):
        dims = {s[-i] for s in shapes if len(s) >= i} - {1}
        out.append(max(dims) if dims else 1)
    return tuple(reversed(out))



def identity(op, a: V, b: V) -> bool:
    """``x * 1``, ``1 * x``, ``x + 0``, ``0 + x``, ``x - 0``, ``x / 1``, ``x ** 1``: no work."""
    for x, c, right in ((a, b, True), (b, a, False)):
        if x.data and c.data == 0 and isinstance(c.const, (int, float)) and not isinstance(c.const, bool):
            k = c.const
            if (isinstance(op, ast.Mult) and k == 1) or (isinstance(op, ast.Add) and k == 0):
                return True
            if right and ((isinstance(op, ast.Sub) and k == 0) or (isinstance(op, (ast.Div, ast.FloorDiv, ast.Pow))
                                                                     and k == 1)):
                return True
    return False


def arith(op, a, b):
    """A binary op folded on known Python values (None where too large to fold)."""
    return {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b, ast.Div: lambda: a / b,
            ast.FloorDiv: lambda: a // b, ast.Mod: lambda: a % b, ast.Pow: lambda: a ** b if abs(b) < 64 else None,
            ast.LShift: lambda: a << b if 0 <= b < 64 else None, ast.RShift: lambda: a >> b,
            ast.BitAnd: lambda: a & b, ast.BitOr: lambda: a | b, ast.BitXor: lambda: a ^ b}[type(op)]()


def compare(op, a, b):
    """A comparison folded on known Python values."""
    return {ast.Lt: a < b, ast.LtE: a <= b, ast.Gt: a > b, ast.GtE: a >= b, ast.Eq: a == b,
            ast.NotEq: a != b}.get(type(op))

