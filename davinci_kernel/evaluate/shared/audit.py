"""In-process evidence of what a forward call did: which torch ops ran, how much work they
did, how many Triton kernels were launched, and whether the worker's own objects were patched.

Covers: torch's C++-level op profiler over a call (which aten compute ops ran, their FLOPs
and input sizes; a Triton launch shows as memory ops only; it still sees ops run with every
Python dispatch mode switched off, ops under a user scope (``record_function``) or inside a
TorchScript function, and ``Tensor.numpy()`` hand-offs; with ``all_threads``, the CPU
candidate's case, ops run on every thread of the process too), a launch counter wrapped
around Triton's ``JITFunction.run`` (compiled and interpreted), and an identity snapshot of
torch, timers, builtins and the harness modules. Used by the reference process (the
reference's work, for coverage estimates) and by candidate workers. Does not cover: trust.
In a candidate's process all of this is the candidate's own claim: it can switch the audit
off or feed it numbers; the harness uses it only to reject (no custom kernel, low
coverage, monkey_patch, host_work), never to accept; the launch wrapper also records each
audited call's launches (kernel, grid, arguments: ``launch_kinds``), from which the judge
estimates its custom kernels' work (kernelwork.py), and where they wrote (``launch_flow``:
each tensor argument's storage and bytes, the output's, torch's later reads; each launch
runs inside a ``dvk::launch`` range so the profiler's op inputs can be ordered around it); on a GPU the call runs under kineto with CUDA
activities too, and the raw kernel table goes to the harness (profile.py). Also counted:
elements read one by one to Python (``.item()``) and bytes copied device to host.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

from .opwork import _numel, broadcast_numel, outermost_compute, profiled_work  # noqa: F401 - tests read them here


def audited_call(torch, fn, args, all_threads: bool = False, gpu: bool = False, strict: bool = False):
    """``fn(*args)`` under torch's C++-level op profiler (the legacy one: it starts in
    milliseconds, where a Python dispatch mode imports dynamo for seconds in every fresh
    worker; it also sees ops run with every Python dispatch mode switched off, and
    ``Tensor.numpy()`` hand-offs). The legacy profiler sees the calling thread only; with
    ``all_threads`` the call runs under the kineto profiler recording every thread (work
    handed to a thread, raw ``_thread`` ones included, stays work), where this torch has
    it. With ``gpu`` it runs under kineto with CPU and CUDA activities (profile.recording),
    synchronized before the profile closes, and the result also holds the raw kernel table
    (``table``). Returns (output, {"ops": {name: calls}, "work": see ``profiled_work``,
    "items": elements read one by one to Python, "dtoh_bytes": bytes copied device→host})."""
    LaunchCounter.inputs = _inputs(args) if LaunchCounter.log is not None else []
    if gpu:
        from .profile import kernel_table, raw_events, recording

        with torch.no_grad(), recording(torch) as prof:
            out = fn(*args)
            torch.cuda.synchronize()
        events, raw = prof.events(), raw_events(prof)
    else:
        with torch.no_grad(), _profiler(torch, all_threads) as prof:
            out = fn(*args)
        events, raw = prof.function_events, None
    ops: dict = {}
    for e in outermost_compute(events):
        ops[e.name[6:]] = ops.get(e.name[6:], 0) + 1
    dtypes = event_dtypes(prof)
    items, dtoh = host_reads(events, prof)
    shaped = shape_reads(events)
    a = {"ops": ops, "work": profiled_work(events, strict, dtypes), "plain": profiled_work(events, strict, dtypes, True),
         "items": items + shaped, "dtoh_bytes": dtoh,
         "item_bytes": item_bytes(events, dtypes) + 8 * shaped, "host_writes": host_writes(events)}
    from .roofline import flops_by_dtype

    a["flops_by_dtype"] = flops_by_dtype(events, dtypes)  # the speed-of-light bound's compute term
    if raw is not None:
        a["table"] = kernel_table(raw)
    if LaunchCounter.log is not None:  # a candidate's call: where its launches wrote
        try:
            a["flow"] = launch_flow(LaunchCounter.log, out, prof)
        except Exception:  # noqa: BLE001 - a candidate's output: no flow, credit as recorded
            a["flow"] = None
        LaunchCounter.storages = {}
    LaunchCounter.inputs = []
    return out, a


def construction(torch, make, device_type: str):
    """(what ``make()`` built, the torch work its construction did as ``audited_call``
    reports it), under the profiler a candidate's call gets on this kind of device (every
    thread on the CPU, kineto with CUDA activities on a GPU): one measure of a model's
    construction for a candidate worker and the reference process alike."""
    box: list = []
    _, a = audited_call(torch, lambda: box.append(make()), [], all_threads=device_type == "cpu",
                        gpu=device_type != "cpu", strict=True)
    return box[0], a.get("work")


def _profiler(torch, all_threads: bool):
    prof = torch.autograd.profiler
    if all_threads:
        try:
            from torch._C._profiler import _ExperimentalConfig

            cfg = _ExperimentalConfig(profile_all_threads=True)
        except (ImportError, TypeError):  # an older torch: the calling thread only
            pass
        else:
            return prof.profile(use_kineto=True, record_shapes=True, with_flops=True, experimental_config=cfg)
    return prof.profile(use_kineto=False, record_shapes=True, with_flops=True)


def host_reads(events, prof) -> tuple[int, int]:
    """(elements read one by one to Python: ``_local_scalar_dense`` calls, i.e. ``.item()``;
    bytes copied from a GPU to the host by ``copy_`` and ``.item()``, from kineto's event
    tree, whose op inputs carry their device; 0 where this profiler has no tree)."""
    items = sum(1 for e in events if getattr(e, "name", "") == "aten::_local_scalar_dense")
    dtoh = 0
    try:
        inner = getattr(prof, "profiler", None) or prof
        roots = inner.kineto_results.experimental_event_tree()
    except Exception:  # noqa: BLE001 - the legacy profiler (CPU, calling thread): no device copies there
        return items, 0
    stack = list(roots)
    while stack:
        n = stack.pop()
        stack.extend(getattr(n, "children", None) or [])
        ins = getattr(getattr(n, "extra_fields", None), "inputs", None) or []
        if n.name == "aten::copy_" and len(ins) >= 2 and _on(ins[0], "cpu") and _on(ins[1], "cuda"):
            dtoh += _bytes(ins[1])
        elif n.name == "aten::_local_scalar_dense" and ins and _on(ins[0], "cuda"):
            dtoh += _bytes(ins[0])
    return items, dtoh


def event_dtypes(prof) -> dict:
    """Each op event's id → its inputs' dtype names, from kineto's records (the event ids of
    ``function_events`` are their correlation ids); empty where this profiler has none."""
    try:
        inner = getattr(prof, "profiler", None) or prof
        return {k.correlation_id(): list(k.dtypes()) for k in inner.kineto_results.events()}
    except Exception:  # noqa: BLE001 - the legacy profiler: no dtypes, the widest case is assumed
        return {}


# bytes of one scalar by the profiler's dtype name; anything else counts as the widest (16)
_SCALAR_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "c10::complex<float>": 8,
                 "c10::complex<double>": 16, "c10::complex<c10::Half>": 4, "long int": 8, "int": 4,
                 "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1}
_WIDEST_SCALAR = 16


def item_bytes(events, dtypes: dict) -> int:
    """Bytes read one element at a time into Python (``.item()``): a complex128 view hands
    over four float32 values per call, so the reads are weighed by their dtype's size (the
    widest scalar where the dtype is unknown)."""
    total = 0
    for e in events:
        if getattr(e, "name", "") == "aten::_local_scalar_dense":
            names = dtypes.get(getattr(e, "id", None)) or []
            total += _SCALAR_BYTES.get(names[0], _WIDEST_SCALAR) if names else _WIDEST_SCALAR
    return total


_WRITES = {"copy_", "fill_", "index_put_", "index_put", "_index_put_impl_", "index_fill_", "masked_fill_", "put_",
           "scatter_", "zero_"}
_SCALAR_TENSORS = {"full", "full_like", "new_full", "scalar_tensor"}  # a Python value made a tensor
_RANGES = {"linspace", "logspace", "arange", "range"}  # Python values as a tensor's ends (and step)
# ops whose output's length depends on the values: its shape hands a number to Python
DATA_SHAPE_OPS = {"bincount", "nonzero", "argwhere", "unique", "_unique", "_unique2", "unique_consecutive",
                  "unique_dim", "masked_select", "repeat_interleave"}


def _top_ops(events):
    """(op name without ``aten::``, event) of the ops no other aten op called."""
    for e in events:
        name = getattr(e, "name", "")
        if not name.startswith("aten::"):
            continue
        up = getattr(e, "cpu_parent", None)
        while up is not None and not getattr(up, "name", "").startswith("aten::"):
            up = getattr(up, "cpu_parent", None)
        if up is None:
            yield name[6:], e


def host_writes(events) -> int:
    """Values handed from Python into tensors in one call, at least: every element of a
    tensor built from Python data (``torch.tensor``/``as_tensor`` of a list: ``lift_fresh``),
    every single-element write (``t[i, j] = v``), every tensor filled from one Python value
    (``torch.full``, ``fill_`` of any size), the two ends of every range
    (``linspace(a, b, 2)`` hands both). Values computed in Python come back this way."""
    n = 0
    for op, e in _top_ops(events):
        shapes = getattr(e, "input_shapes", None) or []
        first = shapes[0] if shapes and isinstance(shapes[0], list) else None
        if op == "lift_fresh":
            n += max(1, _numel(first or []))
        elif op in _WRITES and first is not None and (_numel(first) <= 1 or op == "fill_"):
            n += 1
        elif op in _SCALAR_TENSORS:
            n += 1
        elif op in _RANGES:
            n += 2
    return n


def shape_reads(events) -> int:
    """Calls of ops whose output's length depends on the values (``bincount``, ``nonzero``,
    ``unique``): reading that length reads a number into Python, as ``.item()`` does."""
    return sum(1 for op, _ in _top_ops(events) if op in DATA_SHAPE_OPS)


def _on(t, kind: str) -> bool:
    return str(getattr(t, "device", "")).startswith(kind)


def _bytes(t) -> int:
    dtype = getattr(t, "dtype", None)
    return _numel(list(getattr(t, "sizes", None) or [])) * int(getattr(dtype, "itemsize", 4) or 4)


class LaunchCounter:
    count = 0
    names: dict = {}
    log: list | None = None  # while a call is audited: [name, grid, {param: value}, {param: extent}] of each launch
    storages: dict = {}  # the audited call's launch storages: key → (id, data address, weak reference)
    inputs: list = []  # the audited call's input tensors as it began: (data address, elements, host copy)


LOG_CAP = 256  # launches recorded per audited call (the rest are counted only)
KINDS_CAP = 32  # distinct launches reported per audited call


UNKNOWN = ["?"]  # an argument passed but not recordable (the judge reads it as unknown, never as a default)


def _arg(v):
    """A launch argument as the judge reads it: a number (a ``tl.constexpr`` unwrapped), a
    tensor's element count, else ``UNKNOWN``."""
    if type(v).__name__ == "constexpr" and type(v).__module__.startswith("triton"):
        try:
            v = v.value
        except Exception:  # noqa: BLE001 - a candidate's object
            return UNKNOWN
    if isinstance(v, bool) or isinstance(v, (int, float)):
        return v
    numel = getattr(v, "numel", None)
    if callable(numel) and hasattr(v, "data_ptr"):
        try:
            return ["t", int(numel())]
        except Exception:  # noqa: BLE001 - a candidate's object: no size
            return UNKNOWN
    return UNKNOWN


def _extent(v):
    """(storage key, storage data address, first byte, end byte) of the bytes a tensor view
    spans in its storage; None for anything else."""
    try:
        st = v.untyped_storage()
        item = int(v.element_size())
        lo = int(v.storage_offset()) * item
        span = 0 if v.numel() == 0 else (1 + sum((int(n) - 1) * abs(int(d)) for n, d in zip(v.shape, v.stride())))
        return int(st._cdata), int(st.data_ptr()), lo, lo + span * item, st
    except Exception:  # noqa: BLE001 - not a tensor, or a candidate's object
        return None


def _storage_id(key: int, ptr: int, st) -> int:
    """A small id for a storage within the audited call. A weak reference to each storage is
    held until the call's record is made, so no storage seen in a launch can be freed and its
    identity handed to a new one in the meantime (its memory may be reused: that is a new
    storage with a new id)."""
    table = LaunchCounter.storages
    if key not in table:
        try:
            from torch.multiprocessing.reductions import StorageWeakRef

            ref = StorageWeakRef(st)
        except Exception:  # noqa: BLE001
            ref = None
        try:
            nbytes = int(st.nbytes())
        except Exception:  # noqa: BLE001
            nbytes = 0
        table[key] = (len(table), ptr, ref, nbytes)
    return table[key][0]


def _given(fn, args: tuple, kwargs: dict) -> dict:
    """A launch's arguments by the kernel's parameter names."""
    names = list(getattr(fn, "arg_names", None) or [])
    given = dict(zip(names, args))
    given.update({k: v for k, v in kwargs.items() if k in names})
    return given


def _record(fn, args: tuple, kwargs: dict) -> bool:
    """One launch into ``LaunchCounter.log``: its kernel, grid, arguments by parameter name
    (a grid given as a function is read when Triton calls it) and, for each tensor argument,
    the storage it lives in and the bytes it spans there (``[storage id, first, end]``).
    False where the log is off or full."""
    log = LaunchCounter.log
    if log is None or len(log) >= LOG_CAP:
        return False
    if not log:
        LaunchCounter.storages = {}
    given = _given(fn, args, kwargs)
    bound = {n: _arg(v) for n, v in given.items()}
    extents = {}
    for n, v in given.items():
        if isinstance(bound.get(n), list) and bound[n][0] == "t":
            ext = _extent(v)
            if ext is not None:
                extents[n] = [_storage_id(ext[0], ext[1], ext[4]), ext[2], ext[3]]
    rec = [getattr(getattr(fn, "fn", None), "__name__", "kernel"), None, bound, extents]
    grid = kwargs.get("grid")
    if callable(grid):
        def read(meta, _grid=grid, _rec=rec):
            g = _grid(meta)
            _rec[1] = g
            return g

        kwargs["grid"] = read
    else:
        rec[1] = grid
    log.append(rec)
    return True


@contextmanager
def unrecorded():
    """The harness's own torch work inside a candidate's audited call, kept out of the call's
    record: no op events (record functions off on this thread). It must launch no GPU
    kernel (kineto would list it): ``_before`` and ``_copies`` copy to the host and compare
    there."""
    from torch._C._autograd import _enable_record_function

    _enable_record_function(False)
    try:
        yield
    finally:
        _enable_record_function(True)


def _aside(fn, default):
    """``fn()`` kept out of the call's record (``unrecorded``); ``default`` where it fails
    (the launch itself never depends on it)."""
    try:
        with unrecorded():
            return fn()
    except Exception:  # noqa: BLE001 - a candidate's tensors or this torch's profiler: no comparison
        return default


SNAP_CAP = 1 << 29  # bytes of one launch's tensor arguments copied before it runs (smallest first)


def _inputs(args) -> list:
    """(data address, elements, host copy) of a call's input tensors, smallest first up to
    ``SNAP_CAP`` bytes: a launch that stores a call's input unchanged is no copy of work
    (``_copies``), whatever it computed (an honest ReLU of positive values)."""
    return [(t.data_ptr(), t.numel(), host.reshape(-1)) for _, t, host in _snapshots(enumerate(_leaves(args)))]


def _snapshots(named) -> list:
    """(name, tensor, host copy) of the tensors among ``named`` ((name, value) pairs),
    smallest first up to ``SNAP_CAP`` bytes in all; one that cannot be copied is left out."""
    import torch

    tensors = sorted(((n, v) for n, v in named if isinstance(v, torch.Tensor)),
                     key=lambda nv: nv[1].numel() * nv[1].element_size())
    out, total = [], 0
    for n, t in tensors:
        total += t.numel() * t.element_size()
        if total > SNAP_CAP:
            break
        try:
            out.append((n, t, _host(t)))
        except Exception:  # noqa: BLE001 - a candidate's tensor subclass: not compared
            continue
    return out


def _untouched_input(t, host) -> bool:
    """Whether a launch's tensor is one of the call's inputs as it began."""
    import torch

    try:
        ptr, n = t.data_ptr(), t.numel()
        return any(p == ptr and k == n and old.dtype == host.dtype and bool(torch.equal(old, host.reshape(-1)))
                   for p, k, old in LaunchCounter.inputs)
    except Exception:  # noqa: BLE001
        return False


def _before(fn, args: tuple, kwargs: dict) -> list:
    """(parameter name, the tensor, a host copy of its values, None for one of the call's
    inputs as it began) of a launch's tensor arguments before it runs, smallest first up to
    ``SNAP_CAP`` bytes (for ``_copies``). A device tensor is copied to the host (a transfer,
    no kernel, for a contiguous one)."""
    return [(n, t, None if _untouched_input(t, host) else host)
            for n, t, host in _snapshots(_given(fn, args, kwargs).items())]


def _copies(before: list) -> dict:
    """{parameter: [parameters]}: each tensor argument whose values after the launch are,
    element by element, within ``copy_tolerance`` (relative L2, after the best uniform scale
    within 1 ± ``COPY_SCALE``) of another's (or its own)
    before it (the call's inputs as it began aside: an identity on them is the problem's, a
    ReLU of positive values): a launch that stored into it wrote values that were already there. The judge
    credits no compute for such stores where the kernel read them from that tensor
    (``kernelwork.reached``): arithmetic that cancels (``(y + s) - s``), a weight that is
    almost zero (``y + 1e-30 * g``) or a select that is never true leaves torch's answer as
    it was."""
    import torch

    olds = []  # each earlier tensor flattened once, in float64 where it is floating
    for q, _, old in before:
        try:
            if old is not None and old.numel():
                b = old.reshape(-1)
                olds.append((q, b, b.double() if b.is_floating_point() else None))
        except Exception:  # noqa: BLE001 - a candidate's tensor: not compared
            continue
    out: dict = {}
    for p, t, _ in before:
        try:
            after = _host(t).reshape(-1)
            floating = after.is_floating_point()
            tol = copy_tolerance(after.dtype) if floating else 0.0
            a32 = after.double() if floating else None
            same = []
            for q, b, b32 in olds:
                if b.numel() != after.numel() or b.is_floating_point() != floating:
                    continue
                if not floating:
                    if b.dtype == after.dtype and bool(torch.equal(after, b)):
                        same.append(q)
                    continue
                norm = float(torch.linalg.vector_norm(b32))
                k = float((a32 * b32).sum()) / max(norm * norm, 1e-300)  # the best uniform scale, as precision's
                k = min(max(k, 1.0 - COPY_SCALE), 1.0 + COPY_SCALE)
                diff = float(torch.linalg.vector_norm(a32 - k * b32))
                if math.isfinite(diff) and diff <= tol * max(norm, 1e-30):
                    same.append(q)
            if same:
                out[p] = same
        except Exception:  # noqa: BLE001 - a candidate's tensor: not compared
            continue
    return out


def _uniform(before: list) -> dict:
    """{parameter: value} of the launch's tensor arguments (the call's inputs aside) whose
    every element held one finite number before it ran: a buffer of ones or zeros built at
    construction reads as that constant in the kernel's reading (``kernelwork.reached``), as
    one torch filled in the call does, so ``v * ones / ones`` or ``v + zeros`` is ``v``."""
    out: dict = {}
    for p, _, old in before:
        if old is None or old.numel() < 2 or not old.is_floating_point():
            continue
        flat = old.reshape(-1)
        first = float(flat[0])
        if math.isfinite(first) and bool((flat == flat[0]).all()):
            out[p] = first
    return out


def _host(t):
    """A copy of a tensor's values on the host."""
    return t.detach().to("cpu", copy=True)


COPY_SCALE = 2e-3  # a uniform scale forgiven before comparing (precision.SCALE_ALLOWANCE: the judge forgives it too)
COPY_L2 = 1e-3  # relative L2 distance, after that scale, under which values count as the same


def copy_tolerance(dtype) -> float:
    """Relative L2 distance (after the best uniform scale within 1 ± ``COPY_SCALE``) under
    which a launch's output counts as values already there: ``COPY_L2``, at least four of
    the dtype's machine epsilons. A nudge that small (torch's answer times 1.0002) is inside
    what the judge's precision limits accept of an answer, so it is no work."""
    import torch

    return max(4.0 * float(torch.finfo(dtype).eps), COPY_L2)


def _kind_key(name, grid, args) -> tuple:
    g = grid if isinstance(grid, (tuple, list)) else (grid,)
    programs = 1
    for d in g:
        programs *= int(d) if isinstance(d, int) and not isinstance(d, bool) else 1
    return name, programs, tuple(sorted((k, str(v)) for k, v in args.items()))


def launch_kinds(log: list) -> list:
    """The recorded launches of one call as [name, programs, args, launches], alike ones
    merged, at most ``KINDS_CAP`` of them."""
    kinds: dict = {}
    for rec in log:
        name, grid, args = rec[:3]
        key = _kind_key(name, grid, args)
        if key in kinds:
            kinds[key][3] += 1
        elif len(kinds) < KINDS_CAP:
            kinds[key] = [name, key[1], args, 1]
    return list(kinds.values())


LAUNCH_LABEL = "dvk::launch"  # the record_function range around each recorded launch


def launch_flow(log: list, out, prof) -> dict:
    """Where one call's recorded launches wrote, for the judge's credit (``kernelwork``):
    ``launches``: per recorded launch in order, [index into ``launch_kinds(log)`` (None where
    capped), {tensor parameter: [storage id, first byte, end byte]}, {tensor parameter:
    [parameters it equals after the launch as they were before it]} (``_copies``), {tensor
    parameter: the one value it held before the launch} (``_uniform``)]; ``out``: the same
    extents of the call's output tensors whose storage a launch saw; ``reads``: [storage id,
    launches begun before] for each storage a torch op read outside any launch, the latest
    read (None where this profiler records no op inputs); ``access``: every torch read and
    write of a launch storage in time order (``torch_access``); ``nbytes``: [storage id,
    bytes] of each launch storage."""
    index: dict = {}
    for rec in log:
        key = _kind_key(*rec[:3])
        if key not in index and len(index) < KINDS_CAP:
            index[key] = len(index)
    launches = [[index.get(_kind_key(*rec[:3])), rec[3] if len(rec) > 3 else {}, rec[4] if len(rec) > 4 else {},
                 rec[5] if len(rec) > 5 else {}] for rec in log]
    table = LaunchCounter.storages
    outs = []
    for leaf in _leaves(out):
        ext = _extent(leaf)
        if ext is not None and ext[0] in table:
            outs.append([table[ext[0]][0], ext[2], ext[3]])
    by_ptr = {v[1]: v[0] for v in table.values()}
    acc = torch_access(prof, by_ptr)
    reads = None if acc is None else _torch_reads_of(acc)
    return {"launches": launches, "out": outs, "reads": reads, "access": acc,
            "nbytes": [[v[0], v[3]] for v in table.values() if len(v) > 3]}


def _leaves(out, depth: int = 0) -> list:
    if depth > 4:
        return []
    if isinstance(out, (tuple, list)):
        return [x for o in list(out)[:64] for x in _leaves(o, depth + 1)]
    if isinstance(out, dict):
        return [x for o in list(out.values())[:64] for x in _leaves(o, depth + 1)]
    return [out]


def _torch_reads_of(acc: list) -> list:
    """[storage id, launches begun before the op] of the latest torch read of each launch
    storage (``torch_access``)."""
    reads: dict = {}
    for sid, pos, kind, *_ in acc:
        if kind != WRITE and pos > reads.get(sid, -1):
            reads[sid] = pos
    return sorted([k, v] for k, v in reads.items())


READ, WRITE, UPDATE = 0, 1, 2  # UPDATE: an in-place op that reads its target and writes it
ACCESS_CAP = 4096  # torch accesses of launch storages recorded per call
# ops that pass their input's data on (a copy, a conversion, a read to the host): reads,
# though they compute nothing; every other ``opwork.no_work`` op only handles metadata
DATA_MOVES = {"clone", "copy_", "_to_copy", "to", "contiguous", "lift_fresh_copy", "_local_scalar_dense", "item"}
# in-place ops that replace every element they are given without reading them
OVERWRITES = {"copy_", "fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_",
              "geometric_", "log_normal_", "cauchy_", "set_"}


def torch_access(prof, by_ptr: dict):
    """The torch ops (outside a launch's range) that touched each launch storage, in time
    order: [storage id, launches begun before the op, READ, WRITE or UPDATE, bytes the
    tensor spans(, the value a ``fill_``/``zero_`` wrote)]. A read is an op that computes
    on, copies or hands over the data; an op that only handles metadata (a view,
    ``select``, ``detach``, ``as_strided``: ``opwork.no_work`` outside ``DATA_MOVES``)
    reads nothing itself, its callees are looked at instead (a ``reshape`` that copies). A
    write replaces the bytes a tensor spans without reading them: the target of ``copy_``,
    ``fill_``, ``zero_``, the random fills, an ``out=`` argument (by the op's schema). An
    in-place op that reads its target (``add_``) updates it (a read; its values change).
    None without kineto's event tree (the profiler records no op inputs)."""
    try:
        inner = getattr(prof, "profiler", None) or prof
        roots = list(inner.kineto_results.experimental_event_tree())
    except Exception:  # noqa: BLE001 - the legacy profiler: no op inputs
        return None
    import bisect

    from .opwork import no_work

    starts, ops, stack = [], [], list(roots)
    while stack:
        n = stack.pop()
        if n.name == LAUNCH_LABEL:
            starts.append(n.start_time_ns)
            continue  # what a launch does inside (the interpreter's copies) is the launch's
        name = n.name[6:] if n.name.startswith("aten::") else None
        if name is not None and not (no_work(name) and name not in DATA_MOVES and name not in OVERWRITES):
            ops.append(n)  # its inputs are what it touched: its callees are its own business
            continue
        stack.extend(getattr(n, "children", None) or [])
    starts.sort()
    ops.sort(key=lambda n: n.start_time_ns)
    out: list = []
    for n in ops:
        pos = bisect.bisect_right(starts, n.start_time_ns)
        name = n.name[6:]
        inputs = list(getattr(getattr(n, "extra_fields", None), "inputs", None) or [])
        written = _written(name, inputs)
        for j, t in enumerate(inputs):
            sid = by_ptr.get(getattr(t, "storage_data_ptr", None))
            if sid is not None and len(out) < ACCESS_CAP:
                kind = WRITE if j in written else UPDATE if j == 0 and name.endswith("_") else READ
                rec = [sid, pos, kind, _span(t)]
                value = 0.0 if name == "zero_" else inputs[1] if name == "fill_" and len(inputs) > 1 else None
                if j == 0 and isinstance(value, (int, float)) and not isinstance(value, bool):
                    rec.append(float(value))  # a constant fill: every element is this value
                out.append(rec)
    return out


def _span(t) -> int:
    """Bytes a profiled tensor spans in its storage (from its sizes and strides)."""
    try:
        sizes, strides = list(t.sizes), list(t.strides)
        item = int(getattr(t.dtype, "itemsize", 4) or 4)
        if any(int(d) == 0 for d in sizes):
            return 0
        return (1 + sum((int(d) - 1) * abs(int(s)) for d, s in zip(sizes, strides))) * item
    except Exception:  # noqa: BLE001 - no sizes: nothing known replaced
        return 0


_OUT_ARGS: dict = {}


def _written(name: str, inputs: list) -> set:
    """Positions of the inputs op ``name`` replaces without reading: the first of an
    ``OVERWRITES`` op; any tensor in an ``out=`` argument's place (an op's schema of that
    many arguments marks it written and keyword-only)."""
    if name in OVERWRITES:
        return {0}
    key = (name, len(inputs))
    if key not in _OUT_ARGS:
        pos: set = set()
        try:
            import torch

            for s in torch._C._jit_get_schemas_for_operator("aten::" + name):
                if len(s.arguments) == len(inputs):
                    pos |= {j for j, a in enumerate(s.arguments)
                            if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write}
        except Exception:  # noqa: BLE001 - no schema: nothing written
            pass
        _OUT_ARGS[key] = pos
    return {j for j in _OUT_ARGS[key] if hasattr(inputs[j], "storage_data_ptr")}


def install_launch_counter() -> None:
    """Count Triton launches (compiled and interpreted) by wrapping ``run`` on the classes."""
    try:
        from triton.runtime import jit as tjit
    except Exception:  # noqa: BLE001 - triton missing: CUDA/torch candidates only
        return
    classes = [tjit.JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except Exception:  # noqa: BLE001
        pass
    for cls in classes:
        orig = cls.run
        if getattr(orig, "_dvk_counted", False):
            continue

        def run(self, *args, _orig=orig, **kwargs):
            if not kwargs.get("warmup", False):
                LaunchCounter.count += 1
                name = getattr(getattr(self, "fn", None), "__name__", "kernel")
                LaunchCounter.names[name] = LaunchCounter.names.get(name, 0) + 1
                if _record(self, args, kwargs):
                    from torch.autograd.profiler import record_function

                    rec = LaunchCounter.log[-1]
                    before = _aside(lambda: _before(self, args, kwargs), [])
                    with record_function(LAUNCH_LABEL):
                        result = _orig(self, *args, **kwargs)
                    rec.append(_aside(lambda: _copies(before), {}))
                    rec.append(_aside(lambda: _uniform(before), {}))
                    return result
            return _orig(self, *args, **kwargs)

        run._dvk_counted = True
        cls.run = run


def settle(torch, device: str, all_threads: bool = False) -> None:
    """Run one audited call now, so lazily loaded machinery is in place before anything is
    snapshotted and the first audited call costs what the others do."""
    audited_call(torch, lambda: torch.relu(torch.ones(2, device=device) @ torch.ones(2, 2, device=device)), [],
                 all_threads)


# --------------------------------------------------------------------------- identity snapshot
def _watched(torch, extra=()) -> list:
    import builtins
    import gc
    import sys
    import time

    mods = [torch, torch.nn, torch.nn.functional, torch.cuda, torch.Tensor, torch.nn.Module, torch.autograd,
            time, builtins, gc, torch.cuda.Event]
    for name in ("numpy", "triton", "triton.runtime.jit", "triton.language", "torch.utils.cpp_extension"):
        if name in sys.modules:
            mods.append(sys.modules[name])
    mods += [m for name, m in list(sys.modules.items()) if name.startswith("davinci_kernel.evaluate") and m is not None]
    return mods + list(extra)


def snapshot(torch, extra=()) -> dict:
    """id() of every attribute (and function code) of the objects a worker relies on, and
    torch's global numeric flags. Evidence only: a candidate can restore what it patched
    before this is taken again; what it patches in its own process decides nothing in the
    harness, but a visible patch is a flagged hack."""
    snap = {}
    for obj in _watched(torch, extra):
        base = getattr(obj, "__name__", type(obj).__name__)
        try:
            items = list(vars(obj).items())
        except TypeError:
            continue
        for k, v in items:
            snap[f"{base}.{k}"] = id(v)
            code = getattr(v, "__code__", None)
            if code is not None:
                snap[f"{base}.{k}.__code__"] = id(code)
    snap["torch.flags"] = (
        torch.get_default_dtype(), torch.is_grad_enabled(),
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark,
        torch.get_float32_matmul_precision(), torch.are_deterministic_algorithms_enabled(),
    )
    return snap


def changed(before: dict, after: dict) -> list[str]:
    """Replaced or deleted attributes; new ones only on torch.Tensor / nn.Module (modules
    gain attributes from lazy submodule imports)."""
    out = [k for k, v in before.items() if after.get(k, v) != v]
    out += [k for k in after if k not in before and k.split(".")[0] in ("Tensor", "Module")]
    return out
