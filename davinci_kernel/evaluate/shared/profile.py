"""Which GPU kernels ran, whose they were, and how much of the work was the candidate's own.

Covers, in two halves:
  * recording (candidate worker and reference process): kineto with CPU and CUDA
    activities over a call or a run of calls; ``kernel_table`` turns its raw activity
    records into a size-capped table (top kernels by GPU time: name up to 200 characters,
    time, launches, stream; totals; memcpy/memset time apart). Only activity records count:
    a kernel is in the table because the GPU ran it, not because something launched or
    claimed it. ``attributed`` keeps the kernels launched inside the host ranges of one
    ``record_function`` label (the runtime launch call carries the kernel's correlation id;
    a CUDA graph's kernels carry their ``cudaGraphLaunch``'s), so the timed phase, where
    reference and candidate calls interleave, yields the candidate's kernels alone.
  * classifying (harness): a kernel is custom only by provenance: its base identifier is a
    name the candidate's source defines (``StaticReport.kernels``: ``@triton.jit`` function
    names, ``__global__`` names of ``load_inline`` sources). ``kernel_identifier`` takes a
    kineto (demangled) name to its qualified identifier: return type, template arguments
    and parameters dropped, namespaces kept. Only an unqualified identifier can be the
    candidate's: Triton names its kernels after the Python function, and a ``__global__``
    at file scope demangles unqualified; anything in a namespace (``at::native::…``,
    ``(anonymous namespace)::softmax_warp_forward``, ``cutlass::…``) is a library's, even
    when its last component equals a name the candidate defines. Triton 2.x's signature
    suffix (``name_0d1d2de``) is accepted. ``time_coverage`` = custom kernel time / all
    kernel time; ``work_share`` = the share of the candidate's own executed work done by
    its custom kernels: their work read from the kernels themselves (``kernelwork.py``:
    arithmetic on loaded values, ``tl.dot``, reductions, over the launch grid; a kernel
    that only loads and stores earns nothing unless the reference only moves data) over
    that plus its torch ops' work (``opwork.profiled_work``), and at most the share of the
    reference's work torch left undone (in decomposed ops and in passes, the smaller). The latter alone would credit a torch shortcut
    (Strassen) or a wasteful reference to a kernel that only copies; the former alone
    credits decoy work done beside torch doing the whole problem. The coverage a verdict uses is the
    lower of the two (``combined``): at a small size time share measures launches, not
    work, so a trivial kernel beside torch's matmul reads high time coverage and low work
    coverage.

A ``load_inline`` kernel's work is not estimated (``kernelwork.custom_work`` is None where a
computing CUDA kernel ran): KernelBench's MNIST example (torch convolutions and linear
layers, a custom CUDA max-pool) is judged by its time coverage on the GPU; a CUDA kernel
that only moves data earns nothing where the reference computes.

Does not cover: deciding flags (guards.py). What it still trusts: the candidate's process
records its own kernels (kineto runs inside it, where a ``load_inline`` candidate's native
code could tamper with it); a candidate kernel named exactly like a library kernel that
also ran (e.g. a cuBLAS kernel's name copied into a ``@triton.jit`` function) would have
that kernel's time counted as custom.
"""

from __future__ import annotations

import re
from contextlib import contextmanager

TOP = 48  # rows of the raw kernel table a worker reports
NAME_CHARS = 200
_TRANSFER = ("Memcpy", "Memset")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TRITON_SUFFIX = re.compile(r"_\d[0-9a-z]*\Z")


# --------------------------------------------------------------------------- recording
@contextmanager
def recording(torch, shapes: bool = True):
    """kineto over the block, CPU and CUDA activities (shapes and FLOPs for the audit)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    with profile(activities=acts, record_shapes=shapes, with_flops=shapes) as prof:
        yield prof


def raw_events(prof) -> list:
    """kineto's raw activity records of a finished ``torch.profiler.profile`` (or the
    autograd profiler it wraps)."""
    inner = getattr(prof, "profiler", None) or prof
    res = getattr(inner, "kineto_results", None)
    return list(res.events()) if res is not None else []


def _is_device(e) -> bool:
    return str(e.device_type()).endswith("CUDA") and not e.is_user_annotation()


def attributed(events, label: str) -> set:
    """Correlation ids of the runtime calls made on the host (any thread) while a
    ``record_function(label)`` range was open: the device activities that carry one were
    launched during that range (reference and candidate calls never overlap)."""
    ranges = sorted((e.start_ns(), e.end_ns()) for e in events
                    if e.name() == label and not str(e.device_type()).endswith("CUDA"))
    if not ranges:
        return set()
    import bisect

    starts = [r[0] for r in ranges]
    ids = set()
    for e in events:
        if str(e.device_type()).endswith("CUDA") or e.name() == label or not e.name().startswith(("cu", "hip")):
            continue
        i = bisect.bisect_right(starts, e.start_ns()) - 1
        if i >= 0 and e.start_ns() <= ranges[i][1]:  # calls run one at a time: any thread of the process
            ids.add(e.correlation_id())
    return ids


REF, CAND = "dvk::reference", "dvk::candidate"  # record_function labels of the timed calls


def marked(label: str, fn):
    """``fn`` called inside ``record_function(label)``, its calls counted (``.calls``)."""
    from torch.autograd.profiler import record_function

    def call(*args):
        call.calls += 1
        with record_function(label):
            return fn(*args)

    call.calls = 0
    return call


def timed_table(prof, calls: int) -> dict:
    """The candidate's kernels among the timed phase's records (``attributed`` to ``CAND``)."""
    events = raw_events(prof)
    return kernel_table(events, calls, only=attributed(events, CAND))


def kernel_table(events, calls: int = 1, only: set | None = None, top: int = TOP) -> dict:
    """The raw table of GPU activity among kineto ``events`` (``only``: the correlation ids
    to keep). Times in microseconds, summed over ``calls`` calls."""
    kernels: dict[str, list] = {}
    transfer_us, streams = 0.0, set()
    for e in events:
        if not _is_device(e) or (only is not None and e.correlation_id() not in only):
            continue
        us = e.duration_ns() / 1e3
        if e.name().startswith(_TRANSFER):
            transfer_us += us
            continue
        streams.add(e.device_resource_id())
        k = kernels.setdefault(e.name()[:NAME_CHARS], [0.0, 0, e.device_resource_id()])
        k[0] += us
        k[1] += 1
    rows = sorted(kernels.items(), key=lambda kv: -kv[1][0])
    return {"calls": calls, "total_us": sum(k[0] for k in kernels.values()), "transfer_us": transfer_us,
            "distinct": len(kernels), "streams": len(streams),
            "top": [{"name": n, "time_us": k[0], "calls": k[1], "stream": k[2]} for n, k in rows[:top]]}


def merge_tables(tables: list[dict], top: int = TOP) -> dict:
    """Per-call tables in one message: the ``top`` names by summed time once, each call's
    rows as [name index, launches, time_us] (its other kernels in its totals only)."""
    time_of: dict[str, float] = {}
    for t in tables:
        for r in t["top"]:
            time_of[r["name"]] = time_of.get(r["name"], 0.0) + r["time_us"]
    names = sorted(time_of, key=lambda n: -time_of[n])[:top]
    index = {n: i for i, n in enumerate(names)}
    calls = [{"rows": [[index[r["name"]], r["calls"], r["time_us"]] for r in t["top"] if r["name"] in index],
              **{k: t[k] for k in ("total_us", "transfer_us", "streams", "distinct", "task") if k in t}}
             for t in tables]
    return {"names": names, "calls": calls}


def split_tables(merged: dict) -> list[dict]:
    """``merge_tables`` undone (harness side, on untrusted input): one table per call."""
    names = [str(n)[:NAME_CHARS] for n in (merged.get("names") or []) if isinstance(n, str)]
    out = []
    for c in merged.get("calls") or []:
        if not isinstance(c, dict):
            continue
        rows = [{"name": names[r[0]], "calls": _num(r[1]), "time_us": _num(r[2])} for r in c.get("rows") or []
                if isinstance(r, list) and len(r) == 3 and isinstance(r[0], int) and 0 <= r[0] < len(names)]
        out.append({"top": rows, "calls": 1, "total_us": _num(c.get("total_us")), "task": c.get("task", True) is True,
                    "streams": int(_num(c.get("streams")))})
    return out


def profile_kernels(C, dev, fn, args, calls: int = 3) -> dict:
    """GPU time per call and streams of ``fn(*args)`` over a few calls (the reference
    process's view of the reference: streams it uses, GPU time per call)."""
    with C.no_grad():
        fn(*args)
        C.sync(dev)
        with recording(C.torch, shapes=False) as prof:
            for _ in range(calls):
                fn(*args)
            C.sync(dev)
    t = kernel_table(raw_events(prof), calls)
    return {"total_ms_per_call": t["total_us"] / 1e3 / calls, "streams": t["streams"], "table": t}


# --------------------------------------------------------------------------- classifying (harness)
def kernel_identifier(name: str) -> str:
    """The qualified identifier of a kineto kernel name: ``void at::native::k<4, F>(int, F)``
    → ``at::native::k``; ``relu_kernel`` → ``relu_kernel``; ``Memcpy DtoH (…)`` → ``""``."""
    if name.startswith(_TRANSFER):
        return ""
    s = name.replace("(anonymous namespace)", "{anon}")
    out, depth = [], 0
    for ch in s:  # template arguments and everything from the parameter list on go
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif depth == 0:
            if ch == "(":
                break
            out.append(ch)
    base = "".join(out).strip()
    return base.split()[-1] if base else ""  # a return type before it goes


def is_custom(name: str, defined) -> bool:
    """True when ``name`` is a kernel the candidate's source defines (see the module docstring)."""
    ident = kernel_identifier(name)
    if not ident or not _IDENT.match(ident):
        return False
    return ident in defined or _TRITON_SUFFIX.sub("", ident) in defined


def classify(table: dict, defined) -> dict:
    """Custom launches and time of a worker's raw ``kernel_table`` (rows not in its top
    count as library time: they are in ``total_us`` only)."""
    defined = set(defined or ())
    rows = [r for r in table.get("top") or [] if isinstance(r, dict)]
    custom = [r for r in rows if is_custom(str(r.get("name", "")), defined)]
    total = _num(table.get("total_us"))
    custom_us = sum(_num(r.get("time_us")) for r in custom)
    calls = max(1, int(_num(table.get("calls")) or 1))
    by_name: dict[str, float] = {}
    for r in custom:
        ident = _TRITON_SUFFIX.sub("", kernel_identifier(str(r["name"])))
        by_name[ident] = by_name.get(ident, 0.0) + _num(r.get("calls")) / calls
    return {"custom_us": custom_us, "total_us": total, "calls": calls, "by_name": by_name,
            "custom_launches": sum(int(_num(r.get("calls"))) for r in custom),
            "custom_names": sorted({kernel_identifier(str(r["name"])) for r in custom}),
            "time_coverage": min(1.0, custom_us / total) if total > 0 else None}


def _num(x) -> float:
    return float(x) if isinstance(x, (int, float)) and x == x else 0.0


def work_share(custom: float | None, torch_work: float | None, ref_work: float | None,
               torch_plain: float | None = None, ref_plain: float | None = None) -> float | None:
    """The share of one call's executed work that its custom kernels did: custom / (custom
    + torch), both weighed as the candidate ran them (``kernelwork.custom_work``,
    ``opwork.profiled_work``), and at most the share of the reference's work that torch
    left undone, 1 - torch / reference: work a kernel did beside torch doing the whole
    problem (decoy arithmetic that reaches the output but changes nothing, junk stored
    where a discarded torch op reads it) earns no share, whatever it is weighed at. The
    first bound holds a torch version that lowers its own count (Strassen's products, a
    broadcast for a dense product) to a kernel that only copies. The custom side is capped
    at the reference's work (a kernel cannot claim more than the whole problem). None where
    the custom work is unknown; 0 where nothing ran and the reference computes.

    The share torch left undone is read in two measures, each the same on both sides, and
    the larger share torch did counts: element ops weighed by their decompositions (two
    ``F.batch_norm`` calls standing in for a written-out layer norm are 18 passes, not 2)
    and ``torch_plain`` / ``ref_plain``, one pass per element op (softmax written out
    without its max shift is 3 passes against the fused op's 1, not 3 of its 5 counted
    ops). A torch version cheaper than the reference in both is an algebraic shortcut of a
    wasteful reference: the first bound holds it."""
    if custom is None or torch_work is None:
        return None
    ref = float(ref_work) if isinstance(ref_work, (int, float)) and ref_work > 0 else None
    c = max(0.0, min(custom, ref) if ref else custom)
    total = c + max(0.0, torch_work)
    if total <= 0:
        return 0.0 if ref else None
    if not ref:
        return c / total
    done = max(0.0, torch_work) / ref
    if isinstance(torch_plain, (int, float)) and isinstance(ref_plain, (int, float)) and ref_plain > 0:
        done = max(done, max(0.0, float(torch_plain)) / float(ref_plain))
    return min(c / total, max(0.0, 1.0 - done))


def combined(time_cov: float | None, work_cov: float | None) -> float | None:
    """The coverage a verdict uses: the lower of those known."""
    known = [c for c in (time_cov, work_cov) if c is not None]
    return min(known) if known else None
