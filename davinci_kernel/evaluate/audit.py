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
coverage, monkey_patch), never to accept; on the GPU the profiler's kernel table decides
coverage.
"""

from __future__ import annotations

MEMORY_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "view", "_unsafe_view",
    "reshape", "_reshape_alias", "as_strided", "t", "transpose", "permute", "expand", "squeeze",
    "unsqueeze", "slice", "select", "split", "split_with_sizes", "chunk", "unbind", "detach", "alias",
    "lift_fresh", "clone", "copy_", "_to_copy", "to", "set_", "resize_", "contiguous", "narrow",
    "_local_scalar_dense", "item", "zeros", "zeros_like", "zero_", "fill_", "full", "full_like",
    "ones", "ones_like", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size",
    "result_type", "view_as", "expand_as", "flatten", "unflatten", "movedim", "diagonal", "_unsafe_index",
    "arange", "scalar_tensor", "new_zeros", "new_ones", "new_full", "lift_fresh_copy", "record_stream",
    "_has_compatible_shallow_copy_type", "stride", "size", "numel", "dim", "is_contiguous",
}


def audited_call(torch, fn, args, all_threads: bool = False):
    """``fn(*args)`` under torch's C++-level op profiler (the legacy one: it starts in
    milliseconds, where a Python dispatch mode imports dynamo for seconds in every fresh
    worker; it also sees ops run with every Python dispatch mode switched off, and
    ``Tensor.numpy()`` hand-offs). The legacy profiler sees the calling thread only; with
    ``all_threads`` the call runs under the kineto profiler recording every thread (work
    handed to a thread, raw ``_thread`` ones included, stays work), where this torch has
    it. Returns (output, {"ops": {name: calls}, "work": see ``profiled_work``})."""
    with torch.no_grad(), _profiler(torch, all_threads) as prof:
        out = fn(*args)
    events = prof.function_events
    ops: dict = {}
    for e in outermost_compute(events):
        ops[e.name[6:]] = ops.get(e.name[6:], 0) + 1
    return out, {"ops": ops, "work": profiled_work(events)}


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


def outermost_compute(events):
    """The aten compute ops no other aten op called: each is work the caller asked for.
    A user scope (``record_function``) or a TorchScript function between an op and the
    top does not hide it; an op called by another aten op (matmul's mm) is that op's work."""
    for e in events:
        name = getattr(e, "name", "")
        if not name.startswith("aten::") or name[6:] in MEMORY_OPS:
            continue
        up = getattr(e, "cpu_parent", None)
        while up is not None and not getattr(up, "name", "").startswith("aten::"):
            up = getattr(up, "cpu_parent", None)
        if up is None:
            yield e


def profiled_work(events) -> float:
    """Work of the outermost aten compute ops among profiler events: each op's FLOPs (its
    own and its callees', e.g. matmul's mm) or, where it reports none, the elements of its
    inputs broadcast together (a reduction over broadcast views does the work of the full
    shape) or of its largest input. A top-level ``resolve_conj``/``resolve_neg`` is what
    ``Tensor.numpy()`` runs: a tensor handed to numpy, whose work no torch-level view sees,
    counts as work done outside custom kernels."""
    total = 0.0
    for e in outermost_compute(events):
        shapes = [s for s in (getattr(e, "input_shapes", None) or []) if s]
        sizes = [1, broadcast_numel(shapes)] + [_numel(s) for s in shapes]
        total += max(max(sizes), _flops(e))
    return total


def broadcast_numel(shapes) -> int:
    """Elements of the shape the given shapes broadcast to (1 if they do not broadcast)."""
    shapes = [list(s) for s in shapes if all(isinstance(d, int) for d in s)]
    if not shapes:
        return 1
    out = []
    for i in range(1, max(len(s) for s in shapes) + 1):
        dims = {s[-i] for s in shapes if len(s) >= i} - {1}
        if len(dims) > 1:
            return 1
        out.append(dims.pop() if dims else 1)
    return _numel(out)


def _flops(e) -> float:
    return float(getattr(e, "flops", 0) or 0) + sum(_flops(c) for c in (getattr(e, "cpu_children", None) or []))


def _numel(shape) -> int:
    n = 1
    for d in shape:
        if isinstance(d, int):
            n *= d
    return n


class LaunchCounter:
    count = 0
    names: dict = {}


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
