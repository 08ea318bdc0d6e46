"""In-process evidence of what a forward call did: which torch ops ran, how much work they
did, and how many Triton kernels were launched.

Covers: a ``TorchDispatchMode`` that counts aten compute ops and the elements they wrote
(a Triton launch shows as memory ops only, torch's ReLU as ``clamp_min``), a FLOP count,
and a launch counter wrapped around Triton's ``JITFunction.run`` (compiled and
interpreted). Used by the reference process (the reference's work, for coverage
estimates) and by candidate workers. Does not cover: trust. In a candidate's process all
of this is the candidate's own claim: it can switch the audit off or feed it numbers; the
harness uses it only to reject (no custom kernel, low coverage), never to accept, and the
result says so (``timing_detail``/``warnings``); on the GPU the profiler's kernel table
decides coverage.
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


def make_audit(torch):
    from torch.utils._python_dispatch import TorchDispatchMode

    Tensor = torch.Tensor

    class Audit(TorchDispatchMode):
        """Records which aten compute ops ran and how much work they did (elements out)."""

        def __init__(self):
            super().__init__()
            self.ops: dict = {}
            self.elem_work = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name not in MEMORY_OPS:
                self.ops[name] = self.ops.get(name, 0) + 1
                for leaf in (out if isinstance(out, (list, tuple)) else [out]):
                    if isinstance(leaf, Tensor):
                        self.elem_work += leaf.numel()
            return out

    return Audit


def audited_call(torch, fn, args):
    """``fn(*args)`` under the dispatch audit and a FLOP counter. Returns
    (output, {"ops": {...}, "work": flops + elements written by torch compute ops})."""
    from torch.utils.flop_counter import FlopCounterMode

    audit = make_audit(torch)()
    with torch.no_grad(), FlopCounterMode(display=False) as fc, audit:
        out = fn(*args)
    return out, {"ops": dict(audit.ops), "work": float(fc.get_total_flops()) + float(audit.elem_work)}


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


def settle(torch, device: str) -> None:
    """Load lazily-imported machinery now (dynamo wraps torch.manual_seed on first use of a
    dispatch mode), so what runs later sees a settled torch."""
    audited_call(torch, lambda: torch.relu(torch.ones(2, device=device) @ torch.ones(2, 2, device=device)), [])
