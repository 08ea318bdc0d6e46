"""Bounds on the Triton interpreter's memory accesses in a CPU worker.

Under ``TRITON_INTERPRET`` a pointer is a raw host address and the interpreter's loads,
stores and atomics dereference it unchecked: pointer arithmetic from any tensor argument
(or an integer made a pointer) reads and writes any byte of the worker, its evidence
included. ``install`` wraps the interpreter so that, during a launch, every address a
load, store or atomic touches (masked-off lanes excepted) must lie inside the storage of
one of the tensors passed to that launch (plain ``torch.Tensor`` objects only; a look-alike
object with a ``data_ptr`` opens no range); outside any launch no access is allowed. An
access outside raises ``OutOfBounds`` (the launch fails: a runtime error of the candidate).

Covers: ``tl.load``/``tl.store`` (plain, masked, block pointers, tensor descriptors: all
reach ``create_masked_load``/``create_masked_store``), ``atomic_cas`` and ``atomic_rmw``.
Does not cover: compiled Triton on a GPU (device addresses, the driver's own checks) or
the code policy (``harness/policy``), which refuses pointer types and ``id`` first.
"""

from __future__ import annotations

import threading

import numpy as np

_state = threading.local()  # .ranges: [(start, end)] of the launch running on this thread, or None


class OutOfBounds(RuntimeError):
    pass


def _ranges(torch, args) -> list[tuple[int, int]]:
    """[start, end) of the storage of every plain tensor among a launch's host arguments."""
    out: list[tuple[int, int]] = []
    stack = list(args)
    while stack:
        a = stack.pop()
        if isinstance(a, (tuple, list)):
            stack.extend(a)
            continue
        base = getattr(a, "base", None) if type(a).__name__ in ("TensorWrapper", "TensorDescriptor") else None
        if base is not None:
            stack.append(base)
            continue
        if type(a) in (torch.Tensor, torch.nn.Parameter) and a.device.type == "cpu":
            s = torch.Tensor.untyped_storage(a)
            start = int(s.data_ptr())
            out.append((start, start + int(s.nbytes())))
    return out


def check(ptrs, mask, width: int) -> None:
    """Every address in ``ptrs`` (where ``mask`` holds) and the ``width`` bytes from it lie
    inside one range of the current launch."""
    ranges = getattr(_state, "ranges", None)
    p = np.asarray(ptrs).astype(np.uint64, copy=False)
    if mask is not None:
        m = np.broadcast_to(np.asarray(mask, dtype=bool), p.shape)
        p = p[m]
    else:
        p = p.reshape(-1)
    if p.size == 0:
        return
    if ranges is None:
        raise OutOfBounds("a Triton memory access outside any kernel launch")
    lo, hi = int(p.min()), int(p.max()) + width
    for start, end in ranges:  # the usual case: one tensor holds every address
        if start <= lo and hi <= end:
            return
    ok = np.zeros(p.shape, dtype=bool)
    for start, end in ranges:
        ok |= (p >= np.uint64(start)) & (p + np.uint64(width) <= np.uint64(end))
    if not ok.all():
        bad = int(p[~ok][0])
        raise OutOfBounds(f"a Triton kernel accessed address {bad:#x}, outside every tensor passed to its launch")


def install(torch) -> bool:
    """Wrap the interpreter (once per process); False where it is not importable."""
    try:
        from triton.runtime import interpreter as it
    except Exception:  # noqa: BLE001 - no triton: no interpreter to bound
        return False
    B, G = it.InterpreterBuilder, it.GridExecutor
    if getattr(B, "_dvk_bounded", False):
        return True
    width = lambda ptrs: max(1, ptrs.get_element_ty().primitive_bitwidth // 8)  # noqa: E731
    load, store, cas, rmw = B.create_masked_load, B.create_masked_store, B.create_atomic_cas, B.create_atomic_rmw

    def create_masked_load(self, ptrs, mask, other, *rest):
        check(ptrs.data, mask.data, width(ptrs))
        return load(self, ptrs, mask, other, *rest)

    def create_masked_store(self, ptrs, value, mask, *rest):
        check(ptrs.data, mask.data, width(ptrs))
        return store(self, ptrs, value, mask, *rest)

    def create_atomic_cas(self, ptr, cmp, val, sem, scope):
        check(ptr.data, None, width(ptr))
        return cas(self, ptr, cmp, val, sem, scope)

    def create_atomic_rmw(self, op, ptr, val, mask, sem, scope):
        check(ptr.data, mask.data, width(ptr))
        return rmw(self, op, ptr, val, mask, sem, scope)

    init_args, call = G._init_args_hst, G.__call__

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        _state.ranges = _ranges(torch, list(args_hst) + list(kwargs_hst.values()))
        return args_hst, kwargs_hst

    def __call__(self, *args, **kwargs):
        outer = getattr(_state, "ranges", None)
        try:
            return call(self, *args, **kwargs)
        finally:
            _state.ranges = outer

    B.create_masked_load, B.create_masked_store = create_masked_load, create_masked_store
    B.create_atomic_cas, B.create_atomic_rmw = create_atomic_cas, create_atomic_rmw
    G._init_args_hst, G.__call__ = _init_args_hst, __call__
    B._dvk_bounded = True
    return True
