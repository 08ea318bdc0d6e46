"""How much work a custom kernel did, read from the kernel itself: the other half of coverage
(``opwork.py`` weighs the torch ops; coverage is custom work over custom plus torch work).

Covers, harness side, on the candidate's source (never on its names): ``analyze`` reads the
candidate's kernels (its ``@triton.jit`` functions, ``tritonjit.py``; whether each CUDA
``__global__`` kernel computes, ``cudawork.py``), and ``custom_work`` weighs one call's
recorded launches, each by ``tritonlaunch.launch_detail`` (the abstract interpretation of one
launch), crediting only stores into tensors that reach the call's output (``reached``: the
worker's flow record walked back from the output). A CUDA kernel that computes makes the
figure unknown: its work is not estimated.

Does not cover: which kernels are the candidate's (``profile.is_custom``), the torch side
(``opwork.py``), trust in the recorded launches (the worker's; the GPU's activity records
cap their counts, judge.py). The judge caps each launch at the reference's work per output
element it stored, a call's custom work at the reference's work, and on a GPU the kernel's
real time bounds it too.
"""

from __future__ import annotations

import ast
import math
from dataclasses import replace
from typing import Optional

from ...pysource import parse as parse_source
from .audit import LOG_CAP  # launches of one call: the worker records as many, a flow record is read as far
from .cudawork import cuda_computes
from .tritonjit import jit_functions
from .tritonlaunch import LaunchWork, launch_detail


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
        else:  # passed, not recorded (or unreadable): unknown, never the source's default
            out[k] = ["?"]
    return out


def custom_work(kinds, facts: dict, moves: bool, seen: Optional[dict] = None, cap: int = 32,
                flow=None, per_elem: Optional[float] = None) -> Optional[float]:
    """The work one call's custom kernels did: each recorded launch (``kinds``: the worker's
    [name, programs, args, launches] rows, untrusted) weighed by ``launch_detail``, with the
    elements copy kernels moved added only where the reference only moves data (``moves``).

    ``flow`` (the worker's ``audit.launch_flow``, untrusted): where each launch wrote. Then
    only stores into tensors that reach the call's output are credited (``reached``): the
    output's own bytes, a buffer a later credited launch reads, or one a torch op reads
    after the launch (torch's reads are known per storage, not per byte). ``per_elem``: the
    reference's work per output element; a launch is credited at most that much per element
    it stored into reaching tensors (a kernel cannot claim more work per element than the
    problem does).

    ``seen``: the custom launches per kernel name the GPU's activity records show for the
    call; a kernel recorded more often than it ran is weighed by the runs. A CUDA kernel
    that computes (``cuda_computes``) makes the figure unknown (None): its work is not
    estimated. None also where the worker recorded no launches at all (no audit)."""
    if not isinstance(kinds, list):
        return None
    cuda = facts.get("cuda") or {}
    if any(cuda.values()) and (seen is None or any(cuda.get(n) for n in seen)):
        return None  # a CUDA kernel that computes may have run: its work is not estimated
    rows: dict[int, tuple] = {}
    for i, row in enumerate(kinds[:cap]):
        if not (isinstance(row, list) and len(row) == 4 and isinstance(row[0], str)):
            continue
        name, programs, args, n = row
        programs = max(1, min(_BIG, programs)) if isinstance(programs, int) and not isinstance(programs, bool) else 1
        n = max(0, min(_BIG, n)) if isinstance(n, int) and not isinstance(n, bool) else 0
        rows[i] = (name, programs, _clean_args(args), n)
    per_name: dict[str, float] = {}
    launches: dict[str, int] = {}

    def credit(name: str, d, count: int = 1) -> None:
        w = d.work if per_elem is None else min(d.work, d.stored * max(0.0, per_elem))
        per_name[name] = per_name.get(name, 0.0) + (w + (d.moved if moves else 0.0)) * count
        launches[name] = launches.get(name, 0) + count

    order = _flow(flow)
    if order is None:  # no flow recorded: every store is credited
        for name, programs, args, n in rows.values():
            credit(name, _detail(facts, name, programs, args, None), n)
    else:
        for name, d in reached(rows, facts, *order):
            credit(name, d)
    if seen is not None:
        for name, n in launches.items():
            ran = float(seen.get(name, 0.0) or 0.0)
            if n > ran:
                per_name[name] *= ran / n if n else 0.0
    return sum(per_name.values())


def reached(rows: dict, facts: dict, launches: list, outs: list, reads: Optional[dict],
            access: Optional[list] = None, nbytes: Optional[dict] = None) -> list:
    """(name, ``LaunchWork``) of each recorded launch, credited only for its stores into
    tensors that reach the output, walked from the last launch back: the output's extents
    reach; a credited store makes the tensors its value was read from reach (for the
    launches before it); a storage a torch op read after a launch reaches for that launch
    (all of it: torch's reads are per storage); without ``reads`` (no op inputs recorded)
    every tensor a launch wrote reaches. A launch's stores into a tensor that after it holds
    the values one of the tensors those stores were read from held before it (the worker's
    ``audit._copies``) earn no compute: the stored values were already there, whatever
    arithmetic the kernel did on the way (``(y + s) - s``, ``y + 1e-30 * g``); the tensors
    they were read from still reach. A tensor that held one value throughout when the launch
    began (the worker's ``audit._uniform``: ones or zeros built at construction) is read as
    that constant, as one torch filled in the call is.

    ``access`` (the worker's ``audit.torch_access``: torch reads and writes of each launch
    storage in order): bytes a torch write replaced after a launch no longer reach for it,
    unless a torch read came first; a tensor torch filled with a constant before a launch
    (``_filled``) is read by it as that constant. Torch's record has no offsets: a write spanning the
    whole storage replaces all of it, a smaller one is taken to replace as many of the
    launch's bytes as it spans."""
    live: dict[int, list] = {}
    for sid, lo, hi in outs:
        live.setdefault(sid, []).append((lo, hi, _END))
    nbytes = nbytes or {}
    by_sid: dict[int, list] = {}
    for sid, pos, kind, span, value in access or ():
        by_sid.setdefault(sid, []).append((pos, kind, span, value))
    touched: dict[int, list] = {}  # storage → the launches that took it
    for j, (_, extents, *_) in enumerate(launches):
        for sid, _, _ in extents.values():
            touched.setdefault(sid, []).append(j)
    out = []
    for i in range(len(launches) - 1, -1, -1):
        k, extents, *more = launches[i]
        copies = more[0] if more else {}
        uniform = more[1] if len(more) > 1 else {}
        if k not in rows:
            continue
        name, programs, args, _ = rows[k]
        reach = {}
        for p, (sid, lo, hi) in extents.items():
            if reads is None:
                reach[p] = 1.0
            elif access is None:
                reach[p] = 1.0 if reads.get(sid, -1) > i else _overlap([s[:2] for s in live.get(sid, [])], lo, hi)
            else:
                reach[p] = _reach(by_sid.get(sid, []), live.get(sid, []), i, lo, hi, nbytes.get(sid, 0))
        consts = {} if access is None else {
            p: v for p, (sid, lo, hi) in extents.items()
            if (v := _filled(by_sid.get(sid, []), touched.get(sid, []), i, hi - lo, nbytes.get(sid, 0))) is not None}
        consts.update({p: v for p, v in uniform.items() if p in extents})  # one value throughout, as it ran
        d = _detail(facts, name, programs, args, reach, consts)
        kept = {p for p, qs in copies.items() if p in d.wrote and reach.get(p, 0.0) > 0 and qs & d.reads}
        if kept:  # values already there, read from that tensor: a copy, however much arithmetic
            bare = _detail(facts, name, programs, args, {**reach, **{p: 0.0 for p in kept}}, consts)
            d = replace(d, work=bare.work, stored=bare.stored)
        for p in d.reads:
            if p in extents:
                sid, lo, hi = extents[p]
                live.setdefault(sid, []).append((lo, hi, i))
        out.append((name, d))
    return out


_END = 1 << 62  # the output is read after every launch


def _filled(acc: list, touched: list, i: int, n: int, size: int) -> Optional[float]:
    """The value every byte of a launch storage holds when launch ``i`` begins, where torch
    filled it with a constant in the call (``fill_``, ``zero_``: ``zeros``, ``ones``,
    ``full``) over the whole storage (or at least the launch's ``n`` bytes) and nothing
    changed it since (no torch write or in-place update, no launch took it); else None."""
    last = None
    for pos, kind, span, value in acc:
        if pos <= i and kind != 0:
            last = (pos, span, value)
    if last is None or last[2] is None or not (size and last[1] >= size or not size and last[1] >= n > 0):
        return None
    if any(last[0] <= j < i for j in touched):
        return None
    return last[2]


def _reach(acc: list, live: list, i: int, lo: int, hi: int, size: int) -> float:
    """The share of launch ``i``'s bytes [lo, hi) of one storage that something reads before
    a torch write replaced them: a torch read after the launch (``acc``: (launches begun
    before, READ/WRITE, span) in order), or a later launch or the output (``live``: (lo,
    hi, launch index)); replaced as ``reached`` says."""
    n = max(1, hi - lo)

    def gone(until: int) -> float:
        """Share replaced by torch writes after launch ``i`` among ops begun before launch
        ``until`` (all of them at ``_END``)."""
        w = 0.0
        for pos, kind, span, _ in acc:
            if pos <= i or pos > until:
                continue
            if kind == 1:
                w += 1.0 if size and span >= size else min(1.0, span / n)
        return min(1.0, w)

    share, w = 0.0, 0.0
    for pos, kind, span, _ in acc:  # torch reads (an in-place update reads too), each before the writes that follow it
        if pos <= i:
            continue
        if kind == 1:
            w = min(1.0, w + (1.0 if size and span >= size else min(1.0, span / n)))
        else:
            share = max(share, 1.0 - w)
    if not live:
        return share
    if gone(_END) == 0.0:  # nothing replaced: every later reader's bytes
        return max(share, _overlap([s[:2] for s in live], lo, hi))
    for j in {s[2] for s in live}:
        share = max(share, _overlap([s[:2] for s in live if s[2] == j], lo, hi) * (1.0 - gone(j)))
    return share


def _overlap(spans: list, lo: int, hi: int) -> float:
    """The share of bytes [lo, hi) that the union of ``spans`` covers."""
    if hi <= lo:
        return 0.0
    covered, end = 0, lo
    for a, b in sorted(spans):
        a, b = max(a, end), min(b, hi)
        if b > a:
            covered += b - a
            end = b
    return covered / (hi - lo)


def _detail(facts: dict, name: str, programs: int, args: dict, reach, consts=None) -> LaunchWork:
    try:
        return launch_detail(facts, name, programs, args, reach, consts)
    except Exception:  # noqa: BLE001 - a kernel this reading does not follow earns nothing
        return LaunchWork()


def _flow(flow):
    """The worker's flow record, checked (untrusted): (launches [[kind index, {param:
    (storage, lo, hi)}, {param: params it equals}, {param: its one value}]], output extents, {storage: launches begun before its last torch
    read} or None, torch's reads and writes in order or None, {storage: bytes}); None where there is no record (credit as the launches were recorded)."""
    if not isinstance(flow, dict):
        return None

    def ext(e):
        ok = isinstance(e, list) and len(e) == 3 and all(isinstance(x, int) and not isinstance(x, bool) for x in e)
        return (e[0], max(0, min(_BIG, e[1])), max(0, min(_BIG, e[2]))) if ok else None

    launches = []
    for rec in (flow.get("launches") if isinstance(flow.get("launches"), list) else [])[:LOG_CAP]:
        if not (isinstance(rec, list) and len(rec) in (2, 3, 4) and isinstance(rec[1], dict)):
            continue
        k = rec[0] if isinstance(rec[0], int) and not isinstance(rec[0], bool) else None
        raw = rec[2] if len(rec) > 2 and isinstance(rec[2], dict) else {}
        copies = {p: frozenset(q for q in qs[:64] if isinstance(q, str)) for p, qs in list(raw.items())[:256]
                  if isinstance(p, str) and isinstance(qs, list)}
        raw = rec[3] if len(rec) > 3 and isinstance(rec[3], dict) else {}
        uniform = {p: float(v) for p, v in list(raw.items())[:256] if isinstance(p, str)
                   and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        launches.append((k, {p: e for p, e in ((p, ext(e)) for p, e in rec[1].items() if isinstance(p, str))
                             if e is not None}, copies, uniform))
    outs = [e for e in (ext(x) for x in (flow.get("out") if isinstance(flow.get("out"), list) else [])[:256])
            if e is not None]
    raw = flow.get("reads")
    reads = None
    if isinstance(raw, list):
        reads = {}
        for r in raw[:4096]:
            if isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in r):
                reads[r[0]] = max(reads.get(r[0], -1), r[1])
    access = None
    if reads is not None and isinstance(flow.get("access"), list):
        access = []
        for r in flow["access"][:4096]:
            if not (isinstance(r, list) and len(r) in (4, 5)
                    and all(isinstance(x, int) and not isinstance(x, bool) for x in r[:4]) and r[2] in (0, 1, 2)):
                continue
            v = r[4] if len(r) == 5 and r[2] == 1 else None
            v = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None
            access.append((r[0], r[1], r[2], max(0, min(_BIG, r[3])), v))
    nbytes = {}
    for r in (flow.get("nbytes") if isinstance(flow.get("nbytes"), list) else [])[:LOG_CAP * 8]:
        if isinstance(r, list) and len(r) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in r):
            nbytes[r[0]] = max(0, min(_BIG, r[1]))
    return launches, outs, reads, access, nbytes
