"""Size variants of a problem file, made by rewriting its module-level constants.

Covers: reading the integer constants a KernelBench-format problem defines at module
level (``batch_size = 4096``), rewriting them (AST, not regex) for the CPU small-shape
variant (the task's own ``CPU_SHAPES`` dict), for the shape-perturbation re-check
that catches candidates with hard-coded sizes, and the sizes a candidate is timed at
beside the task's own (``timing_sizes``, drawn as the re-check draws its size). Does not cover: running anything; the
evaluator decides whether a variant is usable (a reference that fails on it is skipped).
"""

from __future__ import annotations

import ast
from typing import Optional

from ..pysource import parse as parse_source

# Constants that usually must keep their value for the problem to stay valid.
_STRUCTURAL = ("kernel", "stride", "padding", "dilation", "group", "head", "dim_head",
               "num_layers", "layers", "axis", "dim_reduce", "reduce_dim", "eps", "seed",
               "output_padding", "pool", "scale", "factor", "p_", "ratio")


def int_constants(source: str) -> dict[str, int]:
    """Module-level ``NAME = <int literal>`` assignments, in file order."""
    tree = parse_source(source)
    out: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            v = node.value
            if isinstance(v, ast.Constant) and type(v.value) is int:
                out[node.targets[0].id] = v.value
    return out


def dict_constant(source: str, name: str) -> Optional[dict]:
    """A module-level ``NAME = {...}`` literal (e.g. ``CPU_SHAPES``), or None."""
    tree = parse_source(source)
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id == name:
                try:
                    value = ast.literal_eval(node.value)
                except ValueError:
                    return None
                return value if isinstance(value, (dict, list, tuple)) else None
    return None


def apply_overrides(source: str, overrides: dict[str, int]) -> str:
    """Return ``source`` with the named module-level constants set to new values."""
    if not overrides:
        return source
    tree = parse_source(source)
    missing = set(overrides)
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in overrides:
                node.value = ast.Constant(value=overrides[name])
                missing.discard(name)
    if missing:
        raise KeyError(f"constants not defined at module level: {', '.join(sorted(missing))}")
    return ast.unparse(tree)


def cpu_overrides(source: str) -> dict[str, int]:
    """The task's own small-shape variant (``CPU_SHAPES = {...}``), or {}."""
    value = dict_constant(source, "CPU_SHAPES")
    return dict(value) if isinstance(value, dict) else {}


def _perturb_value(v: int, up: bool = True) -> int:
    """An odd size near ``v``: power-of-two and divisibility assumptions break too (the
    informational generality check)."""
    if up:
        return (v + v // 4 + 1) | 1
    if v <= 2:
        return v + 1
    return max(2, v - v // 4 - 1)


POW2_GIVEN_UP = 4  # factors of two a power-of-two size may lose
UP_MAX = 3  # a larger size is at most this many times the task's (per size)
DOWN_MIN = 4  # a smaller size is at least the task's / this


def tile(v: int) -> int:
    """The multiple every perturbed size of ``v`` keeps (v = 2^k * m, m odd): 2^k, every
    power-of-two factor, for m >= 3; for a power of two, 2^(k-4) (at most four factors
    given up: 8192 keeps multiples of 512, 128 of 8; else it could only double). A kernel
    specialised to the task's tile multiples still fits; one with ``v`` itself hard-coded
    does not."""
    if v <= 0:
        return 1
    k = (v & -v).bit_length() - 1
    return 1 << (k if v >> k >= 3 else max(0, k - POW2_GIVEN_UP))


def size_choices(v: int, up: bool = True) -> list[int]:
    """Every size a perturbed ``v`` may be drawn as, nearest first: the multiples of
    ``tile(v)`` in (v, ``UP_MAX`` v] (larger) or in [v / ``DOWN_MIN``, v) (smaller). Many,
    so a kernel written for the task's size and a few predicted others meets one it did
    not predict (``docs/guarantees.md`` has each built-in task's count)."""
    t = tile(v)
    if up:
        return [v + t * i for i in range(1, (UP_MAX * v - v) // t + 1)]
    lo = -(-v // DOWN_MIN)
    return [v - t * i for i in range(1, (v - lo) // t + 1) if v - t * i >= max(1, lo)]


def keep_pow2(v: int, up: bool = True, step: int = 1) -> int:
    """The perturbed size of ``v`` that ``step`` picks among ``size_choices`` (step 1: the
    nearest; larger steps wrap around the choices, so a step drawn from a wide range picks
    each about equally often). ``step`` is drawn by the harness, so the size judged is not
    a function of the problem file. A smaller size where there is none (v = 1): v + 1."""
    choices = size_choices(v, up) or ([] if up else size_choices(v, True))
    if not choices:
        return v + 1
    return choices[(max(1, step) - 1) % len(choices)]


def _names(source: str, base: Optional[dict[str, int]]) -> tuple[dict[str, int], list[str]]:
    consts = int_constants(source)
    if base:
        consts.update({k: v for k, v in base.items() if k in consts})
    named = dict_constant(source, "PERTURB")
    if isinstance(named, (list, tuple)):
        return consts, [n for n in named if n in consts]
    return consts, [n for n, v in consts.items() if v >= 2 and not any(s in n.lower() for s in _STRUCTURAL)]


def perturbations(source: str, base: Optional[dict[str, int]] = None, steps: Optional[dict[str, int]] = None
                  ) -> list[dict[str, int]]:
    """Candidate overrides for the shape re-check (judged), most informative first.

    A task may name the sizes to change (``PERTURB = ["batch_size", "dim"]``); else
    every non-structural integer constant ≥ 2 is a candidate. Each size keeps its
    power-of-two factors (``keep_pow2``, by the size's step in ``steps``, drawn by the
    harness; 1 where not given). The first variant makes them all larger (a baked-in grid
    or loop bound then leaves output elements unwritten, which the comparison sees for
    certain), the following ones one at a time, then all smaller (used when the reference
    rejects the earlier or they do not fit the device)."""
    consts, names = _names(source, base)
    if not names:
        return []
    step = {n: (steps or {}).get(n, 1) for n in names}
    variants = [{n: keep_pow2(consts[n], step=step[n]) for n in names}]
    if len(names) > 1:
        variants += [{n: keep_pow2(consts[n], step=step[n])} for n in names]
    variants.append({n: keep_pow2(consts[n], up=False, step=step[n]) for n in names})
    return variants


def perturbed_names(source: str, base: Optional[dict[str, int]] = None) -> list[str]:
    """The sizes the shape re-check changes (see ``perturbations``)."""
    return _names(source, base)[1]


def odd_sizes(source: str, base: Optional[dict[str, int]] = None) -> list[dict[str, int]]:
    """Overrides for the informational generality check: odd sizes (larger, then smaller).
    A kernel specialised to tile multiples may fail here; that goes to the feedback, not the verdict."""
    consts, names = _names(source, base)
    if not names:
        return []
    return [{n: _perturb_value(consts[n]) for n in names}, {n: _perturb_value(consts[n], up=False) for n in names}]


def without_constant(source: str, name: str) -> str:
    """``source`` without its module-level ``NAME = ...`` assignment (none: unchanged)."""
    tree = parse_source(source)
    body = [n for n in tree.body if not (isinstance(n, ast.Assign) and len(n.targets) == 1
                                         and isinstance(n.targets[0], ast.Name) and n.targets[0].id == name)]
    if len(body) == len(tree.body):
        return source
    tree.body = body
    return ast.unparse(tree)


def timing_sizes(source: str, n: int, rng, small: bool = False) -> list[dict[str, int]]:
    """``n`` distinct size overrides to time a candidate at beside the task's own, drawn as
    the perturbed re-check draws its size: each size's step (1, 2 or 3) from ``rng``
    (``random.Random``), then a variant of ``perturbations`` that is new, sizes no larger
    than the task's first (a candidate would otherwise be timed at up to 7x the task's
    size, which can take minutes or not fit the device), larger ones only where the
    smaller run out. With ``small`` the sizes are drawn around the task's CPU variant and
    include its overrides. Fewer than ``n`` where the problem has fewer distinct variants."""
    base = cpu_overrides(source) if small else {}
    variant = apply_overrides(source, base)
    consts, names = _names(variant, None)
    out: list[dict[str, int]] = []
    larger: list[dict[str, int]] = []
    for _ in range(8 * max(0, n)):
        if len(out) >= n or not names:
            break
        for o in perturbations(variant, steps={k: rng.choice((1, 2, 3)) for k in names}):
            size = {**base, **o}
            if size in out or size in larger:
                continue
            if all(v <= consts[k] for k, v in o.items()):
                out.append(size)
                break
            larger.append(size)
    return (out + larger)[:n]


def sized_source(source: str, overrides: dict[str, int]) -> str:
    """The problem at ``overrides`` (from ``timing_sizes``), its ``CPU_SHAPES`` dropped so
    that no evaluator sets the sizes back."""
    return without_constant(apply_overrides(source, overrides), "CPU_SHAPES")
