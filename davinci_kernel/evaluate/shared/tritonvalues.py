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
    variables and integer arithmetic on them), None where not known."""
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

