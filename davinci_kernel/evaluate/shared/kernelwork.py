"""How much work a custom kernel did, read from the kernel itself: the other half of coverage
(``opwork.py`` weighs the torch ops; coverage is custom work over custom plus torch work).

Covers, harness side, on the candidate's source (never on its names): ``analyze`` reads the
candidate's kernels (its ``@triton.jit`` functions, ``tritonjit.py``; whether each CUDA
``__global__`` kernel computes, ``cudawork.py``), and ``custom_work`` weighs one call's
recorded launches, each by ``tritonlaunch.launch_work`` (the abstract interpretation of one
launch). A CUDA kernel that computes makes the figure unknown: its work is not estimated.

Does not cover: which kernels are the candidate's (``profile.is_custom``), the torch side
(``opwork.py``), trust in the recorded launches (the worker's; the GPU's activity records
cap their counts, judge.py). The judge caps a call's custom work at the reference's work, and
on a GPU the kernel's real time bounds it too.
"""

from __future__ import annotations

import ast
from typing import Optional

from ...pysource import parse as parse_source
from .cudawork import cuda_computes
from .tritonjit import jit_functions
from .tritonlaunch import launch_work


def analyze(source: str) -> dict:
    """The candidate's kernels: ``{"triton": {name: FunctionDef}, "cuda": {name: computes}}``
    (empty where the source does not parse)."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return {"triton": {}, "cuda": {}}
    triton = jit_functions(tree)
    cuda: dict[str, bool] = {}
    for c in ast.walk(tree):
        if isinstance(c, ast.Constant) and isinstance(c.value, str) and "__global__" in c.value:
            cuda.update(cuda_computes(c.value))
    return {"triton": triton, "cuda": cuda}


_BIG = 2 ** 48  # launch figures beyond this are not believed (clamped)


def _clean_args(args) -> dict:
    out = {}
    for k, v in (args.items() if isinstance(args, dict) else ()):
        if not isinstance(k, str):
            continue
        if isinstance(v, bool):
            out[k] = v
        elif isinstance(v, int):
            out[k] = max(-_BIG, min(_BIG, v))
        elif isinstance(v, float) and v == v and abs(v) < _BIG:
            out[k] = v
        elif isinstance(v, list) and len(v) == 2 and v[0] == "t" and isinstance(v[1], int) \
                and not isinstance(v[1], bool):
            out[k] = ["t", max(0, min(_BIG, v[1]))]
    return out


def custom_work(kinds, facts: dict, moves: bool, seen: Optional[dict] = None, cap: int = 32) -> Optional[float]:
    """The work one call's custom kernels did: each recorded launch (``kinds``: the worker's
    [name, programs, args, launches] rows, untrusted) weighed by ``launch_work``, with the
    elements copy kernels moved added only where the reference only moves data (``moves``).
    ``seen``: the custom launches per kernel name the GPU's activity records show for the
    call; a kernel recorded more often than it ran is weighed by the runs. A CUDA kernel
    that computes (``cuda_computes``) makes the figure unknown (None): its work is not
    estimated. None also where the worker recorded no launches at all (no audit)."""
    if not isinstance(kinds, list):
        return None
    cuda = facts.get("cuda") or {}
    if any(cuda.values()) and (seen is None or any(cuda.get(n) for n in seen)):
        return None  # a CUDA kernel that computes may have run: its work is not estimated
    per_name: dict[str, float] = {}
    launches: dict[str, int] = {}
    for row in kinds[:cap]:
        if not (isinstance(row, list) and len(row) == 4 and isinstance(row[0], str)):
            continue
        name, programs, args, n = row
        programs = max(1, min(_BIG, programs)) if isinstance(programs, int) and not isinstance(programs, bool) else 1
        n = max(0, min(_BIG, n)) if isinstance(n, int) and not isinstance(n, bool) else 0
        try:
            w, m = launch_work(facts, name, programs, _clean_args(args))
        except Exception:  # noqa: BLE001 - a kernel this reading does not follow earns nothing
            w, m = 0.0, 0.0
        per_name[name] = per_name.get(name, 0.0) + (w + (m if moves else 0.0)) * n
        launches[name] = launches.get(name, 0) + n
    if seen is not None:
        for name, n in launches.items():
            ran = float(seen.get(name, 0.0) or 0.0)
            if n > ran:
                per_name[name] *= ran / n if n else 0.0
    return sum(per_name.values())
