"""The process that loads and runs candidates. The harness never imports candidate code.

Covers: one long-lived worker per device slot. For each job it (1) builds the trusted
reference from the problem source and, when the harness asks, computes reference
outputs for every trial *before* the candidate is imported, poisoning them before they
are freed; (2) imports the candidate from a file; (3) runs correctness trials on fresh
clones with a poisoned allocator, under a dispatch audit (which torch ops ran, how much
work they did) and a Triton launch counter; (4) re-runs to expose result caching and
uninitialized memory, and at perturbed sizes to expose hard-coded shapes; (5) if the
harness says so, times reference and candidate interleaved (L2 flush, device events
cross-checked against device-synchronized wall time) and profiles GPU kernels; (6)
checks that nothing it relies on was replaced. Outputs leave as raw bytes (transfer.py);
the comparison happens in the harness process, which the candidate never touches.

Does not cover: OS-level sandboxing. Network, files, ctypes and raw memory writes are
not blocked; a candidate that corrupts the interpreter through ctypes could fake this
process's reports. The harness contains that by killing and replacing any worker that
ran a flagged, crashed or timed-out candidate, and by checking timing against cached
clean baselines.
"""

from __future__ import annotations

import os
import sys
import traceback

# Captured at import, before any candidate code exists in this process.
import builtins as _builtins
import gc as _gc
import time as _time

_perf = _time.perf_counter
_type = type
_isinstance = isinstance
_len = len
_id = id
_getattr = getattr
_sorted = sorted

C = None  # namespace of torch references captured in main(), before any candidate import


class _Captured:
    pass


def _capture(torch):
    c = _Captured()
    c.torch = torch
    c.Tensor = torch.Tensor
    c.clone = torch.Tensor.clone
    c.copy_ = torch.Tensor.copy_
    c.fill_ = torch.Tensor.fill_
    c.data_ptr = torch.Tensor.data_ptr
    c.untyped_storage = torch.Tensor.untyped_storage
    c.equal = torch.equal
    c.empty = torch.empty
    c.no_grad = torch.no_grad
    c.manual_seed = torch.manual_seed
    c.cuda_available = torch.cuda.is_available()
    if c.cuda_available:
        c.sync = torch.cuda.synchronize
        c.Event = torch.cuda.Event
        c.record = torch.cuda.Event.record
        c.elapsed = torch.cuda.Event.elapsed_time
        c.empty_cache = torch.cuda.empty_cache
        c.sleep = getattr(torch.cuda, "_sleep", None)  # a GPU busy-wait of N clock cycles
    return c


# --------------------------------------------------------------------------- integrity
def _watched_objects(extra=()):
    import torch

    mods = [torch, torch.nn, torch.nn.functional, torch.cuda, torch.Tensor, torch.nn.Module,
            torch.autograd, _time, _builtins, _gc, torch.cuda.Event, torch.utils.cpp_extension
            if hasattr(torch.utils, "cpp_extension") else torch]
    try:
        import numpy

        mods.append(numpy)
    except ImportError:
        pass
    for name in ("triton", "triton.runtime.jit", "triton.language"):
        if name in sys.modules:
            mods.append(sys.modules[name])
    for name, m in list(sys.modules.items()):
        if name.startswith("davinci_kernel.evaluate") and m is not None:
            mods.append(m)
    return mods + list(extra)


def snapshot(extra=()) -> dict:
    """id() of every attribute (and function code) of the objects the harness relies on."""
    import torch

    snap = {}
    for obj in _watched_objects(extra):
        base = _getattr(obj, "__name__", _type(obj).__name__)
        try:
            items = list(vars(obj).items())
        except TypeError:
            continue
        for k, v in items:
            snap[f"{base}.{k}"] = _id(v)
            code = _getattr(v, "__code__", None)
            if code is not None:
                snap[f"{base}.{k}.__code__"] = _id(code)
    snap["torch.flags"] = (
        torch.get_default_dtype(), torch.is_grad_enabled(),
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.enabled, torch.backends.cudnn.benchmark,
        torch.get_float32_matmul_precision(), torch.are_deterministic_algorithms_enabled(),
    )
    return snap


def diff_snapshot(before: dict, after: dict) -> list[str]:
    changed = [k for k, v in before.items() if after.get(k, v) != v]
    changed += [k for k in after if k not in before and not k.startswith("davinci_kernel")]
    # New attributes on modules are common (lazy submodule imports); only replaced or
    # deleted ones, and new attributes on torch.Tensor / nn.Module, count.
    return [k for k in changed if k in before or k.split(".")[0] in ("Tensor", "Module")]


# --------------------------------------------------------------------------- audit
_MEMORY_OPS = {
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


def _make_audit(torch):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Audit(TorchDispatchMode):
        """Records which aten compute ops ran and how much work they did (elements out)."""

        def __init__(self):
            super().__init__()
            self.ops = {}
            self.elem_work = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name not in _MEMORY_OPS:
                self.ops[name] = self.ops.get(name, 0) + 1
                for leaf in (out if _isinstance(out, (list, tuple)) else [out]):
                    if _isinstance(leaf, C.Tensor):
                        self.elem_work += leaf.numel()
            return out

    return Audit


class _LaunchCounter:
    count = 0
    names: dict = {}


def _install_launch_counter():
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
        if _getattr(orig, "_dvk_counted", False):
            continue

        def run(self, *args, _orig=orig, **kwargs):
            if not kwargs.get("warmup", False):
                _LaunchCounter.count += 1
                name = _getattr(_getattr(self, "fn", None), "__name__", "kernel")
                _LaunchCounter.names[name] = _LaunchCounter.names.get(name, 0) + 1
            return _orig(self, *args, **kwargs)

        run._dvk_counted = True
        cls.run = run


# --------------------------------------------------------------------------- helpers
def _exec_source(source: str, name: str, path: str | None = None):
    """Execute source as a fresh module (from a file when given, so inspect.getsource works)."""
    import importlib.util
    import types

    if path is not None:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(source)
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod
    mod = types.ModuleType(name)
    mod.__dict__["__file__"] = f"<{name}>"
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod


def _to_device(x, dev):
    if _isinstance(x, C.Tensor):
        return x.to(dev) if x.device != dev else x
    if _isinstance(x, (list, tuple)):
        return _type(x)(_to_device(v, dev) for v in x)
    return x


def _clone_args(args):
    out = []
    for a in args:
        out.append(C.clone(a) if _isinstance(a, C.Tensor) else a)
    return out


def _tensor_leaves(x):
    from .transfer import flatten

    return [v for v in flatten(x) if _isinstance(v, C.Tensor)]


def _is_cuda_error(exc: BaseException) -> bool:
    text = f"{_type(exc).__name__}: {exc}"
    keys = ("CUDA error", "illegal memory access", "device-side assert", "cudaError", "CUDA_ERROR",
            "misaligned address", "unspecified launch failure", "an illegal instruction")
    return any(k in text for k in keys)


def _trim_traceback(exc: BaseException, candidate_file: str | None) -> str:
    """Error text with the candidate's own frames and the last lines that say what failed."""
    lines = traceback.format_exception(_type(exc), exc, exc.__traceback__)
    text = "".join(lines)
    keep = []
    for block in lines[1:-1]:
        if candidate_file and candidate_file in block:
            keep.append(block.replace(candidate_file, "candidate.py"))
    msg = lines[-1].strip()
    if "Error building extension" in text or "ninja" in text:
        errs = [ln for ln in text.splitlines() if " error" in ln or "error:" in ln]
        msg = "\n".join(errs[:12]) or msg
    return ("".join(keep[-3:]) + msg)[-3000:]


class _Job:
    def __init__(self, job: dict):
        self.__dict__.update(job)


# --------------------------------------------------------------------------- job
class Runner:
    """Executes one job: check phase, then (on the harness's word) the timing phase."""

    def __init__(self, job: dict, conn):
        self.j = _Job(job)
        self.conn = conn
        self.torch = C.torch
        self.dev = self.torch.device(self.j.device)
        self.flags: list[str] = []
        self.notes: list[str] = []
        self.out: dict = {"flags": self.flags, "notes": self.notes, "leaves": {}}
        self.n_files = 0
        self.pending: list = []  # (key, leaf index, tensor) awaiting the harness's sample seed

    # ---------------------------------------------------------------- utilities
    def flag(self, name: str, why: str) -> None:
        if name not in self.flags:
            self.flags.append(name)
            self.notes.append(f"{name}: {why}")

    def save(self, key: str, output) -> list:
        from .transfer import SAMPLE_MIN, flatten, write_leaf

        metas = []
        sample_ok = self.dev.type == "cuda" and not key.startswith(("ref", "pref"))
        for i, leaf in enumerate(flatten(output)):
            if sample_ok and _isinstance(leaf, C.Tensor) and leaf.numel() > SAMPLE_MIN:
                self.pending.append((key, i, leaf))
                metas.append({"kind": "pending", "dtype": str(leaf.dtype).replace("torch.", ""),
                              "shape": list(leaf.shape)})
                continue
            self.n_files += 1
            path = os.path.join(self.j.shm_dir, f"{self.n_files}.bin")
            metas.append(write_leaf(self.torch, leaf, path))
        self.out["leaves"][key] = metas
        return metas

    def send_samples(self, seed: int) -> tuple[dict, dict]:
        """Gather the harness's random sample of every pending large output. Returns the
        leaves and the seconds spent drawing indices, gathering and writing."""
        from .transfer import sample_indices, write_leaf

        out: dict = {}
        secs = {"sample_indices": 0.0, "sample_upload": 0.0, "sample_gather": 0.0, "sample_write": 0.0}
        drawn: dict = {}  # numel -> indices on the device: the same for every output of that size
        for key, i, leaf in self.pending:
            idx = drawn.get(leaf.numel())
            if idx is None:
                t0 = _perf()
                host = sample_indices(self.torch, leaf.numel(), seed)
                t_up = _perf()
                idx = drawn[leaf.numel()] = host.to(self.dev)
                secs["sample_indices"] += t_up - t0
                secs["sample_upload"] += _perf() - t_up
            t1 = _perf()
            vals = leaf.reshape(-1)[idx]
            self.sync()
            t2 = _perf()
            self.n_files += 1
            meta = write_leaf(self.torch, vals, os.path.join(self.j.shm_dir, f"{self.n_files}.bin"))
            meta.update(sampled=True, seed=seed, full_shape=list(leaf.shape), numel=leaf.numel())
            out.setdefault(key, {})[i] = meta
            secs["sample_gather"] += t2 - t1
            secs["sample_write"] += _perf() - t2
        self.pending = []
        return out, secs

    def sync(self):
        if self.dev.type == "cuda":
            C.sync(self.dev)

    def gen_inputs(self, mod, seed: int):
        torch = self.torch
        with torch.device(self.dev):
            C.manual_seed(seed)
            inputs = mod.get_inputs()
        return [_to_device(x, self.dev) for x in inputs]

    def build(self, mod, cls_name: str, init_args):
        torch = self.torch
        with torch.device(self.dev):
            C.manual_seed(self.j.init_seed)
            model = _getattr(mod, cls_name)(*init_args)
        if _isinstance(model, torch.nn.Module):
            model = model.to(self.dev)
        return model

    def init_args(self, mod):
        torch = self.torch
        with torch.device(self.dev):
            C.manual_seed(self.j.init_seed)
            return [_to_device(x, self.dev) for x in mod.get_init_inputs()]

    def poison(self, metas, value: float):
        """Fill freed allocator blocks of the expected output sizes, so unwritten output memory shows."""
        torch = self.torch
        blocks = []
        for m in metas or []:
            if m.get("kind") != "tensor":
                continue
            n = 1
            for s in m["shape"]:
                n *= s
            dt = _getattr(torch, m["dtype"])
            t = C.empty(max(n, 1), dtype=dt, device=self.dev)
            if dt.is_floating_point:
                C.fill_(t, value)
            else:
                C.fill_(t, 0x5A5A if dt not in (torch.bool, torch.uint8, torch.int8) else 0x5A)
            blocks.append(t)
        del blocks

    # ---------------------------------------------------------------- reference
    def reference_phase(self):
        j, torch = self.j, self.torch
        self.ref_mod = _exec_source(j.task_source, "dvk_reference")
        self.ref_init = self.init_args(self.ref_mod)
        self.ref_model = self.build(self.ref_mod, "Model", self.ref_init)
        self.ref_forward = _type(self.ref_model).forward
        self.pristine = [self.gen_inputs(self.ref_mod, s) for s in j.seeds]
        if not j.need_ref:
            return
        Audit = _make_audit(torch)
        from torch.utils.flop_counter import FlopCounterMode

        self.out["ref_mutates"] = False
        self.out["ref_aliases"] = False
        for i, inputs in enumerate(self.pristine):
            args = _clone_args(inputs)
            with C.no_grad():
                if i == 0:
                    audit = Audit()
                    with FlopCounterMode(display=False) as fc, audit:
                        out = self.ref_model(*args)
                    self.out["ref_work"] = float(fc.get_total_flops()) + float(audit.elem_work)
                else:
                    out = self.ref_model(*args)
            self.sync()
            for a, b in zip(args, inputs):
                if _isinstance(a, C.Tensor) and not C.equal(a, b):
                    self.out["ref_mutates"] = True
            if self._aliases(out, args):
                self.out["ref_aliases"] = True
            self.save(f"ref{i}", out)
            self._poison_outputs(out)
            del out, args

    def _poison_outputs(self, out):
        for t in _tensor_leaves(out):
            if t.dtype.is_floating_point:
                try:
                    C.fill_(t, float("nan"))
                except RuntimeError:
                    pass

    def _aliases(self, out, args) -> bool:
        ranges = []
        for a in args:
            if _isinstance(a, C.Tensor) and a.numel() > 0:
                st = C.untyped_storage(a)
                ranges.append((st.data_ptr(), st.data_ptr() + st.nbytes()))
        for t in _tensor_leaves(out):
            if t.numel() == 0:
                continue
            p = C.data_ptr(t)
            if any(lo <= p < hi for lo, hi in ranges):
                return True
        return False

    # ---------------------------------------------------------------- candidate
    def load_candidate(self) -> bool:
        j = self.j
        os.environ["TORCH_EXTENSIONS_DIR"] = j.ext_dir
        self.cand_file = os.path.join(j.shm_dir, "candidate.py")
        self.before = snapshot(extra=[self.ref_mod, _type(self.ref_model)])
        _LaunchCounter.count = 0
        _LaunchCounter.names = {}
        try:
            self.cand_mod = _exec_source(j.candidate_source, f"dvk_candidate_{j.job_id}", self.cand_file)
        except BaseException as e:  # noqa: BLE001 - candidate code: every failure is data
            kind = "import_error" if _isinstance(e, ImportError) else "compile_error"
            if _isinstance(e, SyntaxError):
                kind = "syntax_error"
            self.out.update(stage="compile", error_kind=kind, error_msg=_trim_traceback(e, self.cand_file),
                            cuda_broken=_is_cuda_error(e))
            return False
        if not _isinstance(_getattr(self.cand_mod, "ModelNew", None), _type):
            self.out.update(stage="load", error_kind="no_modelnew", error_msg="ModelNew is not a class after import")
            return False
        try:
            init = self.init_args(self.ref_mod)
            self.cand_model = self.build(self.cand_mod, "ModelNew", init)
        except BaseException as e:  # noqa: BLE001
            self.out.update(stage="load", error_kind="runtime_error",
                            error_msg="ModelNew(*get_init_inputs()) failed: " + _trim_traceback(e, self.cand_file),
                            cuda_broken=_is_cuda_error(e))
            return False
        self.out["compiled"] = True
        return True

    def call_candidate(self, args, audit=None):
        threads_before = set(_threads())
        children_before = _children()
        if audit is not None:
            from torch.utils.flop_counter import FlopCounterMode

            with C.no_grad(), FlopCounterMode(display=False) as fc, audit:
                out = self.cand_model(*args)
            audit.flops = float(fc.get_total_flops())
        else:
            with C.no_grad():
                out = self.cand_model(*args)
        self.sync()
        new_threads = _outliving(threads_before)
        if new_threads:
            self.flag("threads", f"{_len(new_threads)} new thread(s) alive after forward: "
                                 f"{', '.join(new_threads[:4])}")
        if _children() - children_before:
            self.flag("subprocess", "forward started child processes")
        for leaf in _tensor_leaves(out) if _isinstance(out, (list, tuple, dict)) else [out]:
            if _isinstance(leaf, C.Tensor) and _type(leaf) is not C.Tensor:
                self.flag("tensor_subclass", f"output is a {_type(leaf).__name__}, not a plain torch.Tensor")
        return out

    def check_phase(self) -> None:
        j, torch = self.j, self.torch
        Audit = _make_audit(torch)
        out_meta = j.out_meta or self.out["leaves"].get("ref0")
        self.out["stage"] = "correctness"
        self.cand_inputs = []
        for i, inputs in enumerate(self.pristine):
            args = _clone_args(inputs)
            self.poison(out_meta, float("nan"))
            audit = Audit() if i == 0 else None
            out = self.call_candidate(args, audit)
            if audit is not None:
                self.out["cand_ops"] = dict(audit.ops)
                self.out["cand_work"] = audit.flops + float(audit.elem_work)
                self.out["custom_launches"] = _LaunchCounter.count
                self.out["launch_names"] = dict(_LaunchCounter.names)
            for a, b in zip(args, inputs):
                if _isinstance(a, C.Tensor) and not C.equal(a, b):
                    self.out["cand_mutates"] = True
            if self._aliases(out, args):
                self.out["cand_aliases"] = True
            self.save(f"cand{i}", out)
            self.cand_inputs.append(args)
            del out
        # Same buffers, new contents: a result cached on pointers or shapes shows here.
        if _len(self.pristine) >= 2:
            a0, p1 = self.cand_inputs[0], self.pristine[1]
            if all(not _isinstance(x, C.Tensor) or (x.shape == y.shape and x.dtype == y.dtype) for x, y in zip(a0, p1)):
                for x, y in zip(a0, p1):
                    if _isinstance(x, C.Tensor):
                        C.copy_(x, y)
                self.save("recheck1", self.call_candidate(a0))
        # Same inputs, different allocator poison: output built from uninitialized memory differs.
        args = _clone_args(self.pristine[0])
        self.poison(out_meta, 12345.0)
        self.save("determinism0", self.call_candidate(args))
        del args
        self.perturb_phase()

    def perturb_phase(self):
        """Correctness at other sizes (module-level constants changed)."""
        j, torch = self.j, self.torch
        from ..tasks.shapes import apply_overrides

        self.conn.send({"event": "phase", "phase": "perturbation"})
        for k, overrides in enumerate(j.perturb or []):
            try:
                src = apply_overrides(j.task_source, overrides)
                mod = _exec_source(src, f"dvk_reference_p{k}")
                init = self.init_args(mod)
                ref = self.build(mod, "Model", init)
                inputs = self.gen_inputs(mod, j.perturb_seed)
                if j.need_ref_perturb:
                    with C.no_grad():
                        ref_out = ref(*_clone_args(inputs))
                    self.sync()
                    self.save("pref", ref_out)
                    self._poison_outputs(ref_out)
                    del ref_out
            except BaseException as e:  # noqa: BLE001 - the reference rejects this variant: try the next
                self.notes.append(f"perturbation {overrides} skipped: {_type(e).__name__}")
                continue
            self.out["perturb_used"] = overrides
            try:
                with torch.device(self.dev):
                    C.manual_seed(j.init_seed)
                    model = self.cand_mod.ModelNew(*init)
                if _isinstance(model, torch.nn.Module):
                    model = model.to(self.dev)
                saved, self.cand_model = self.cand_model, model
                try:
                    out = self.call_candidate(_clone_args(inputs))
                finally:
                    self.cand_model = saved
                self.save("pcand", out)
            except BaseException as e:  # noqa: BLE001
                if _is_cuda_error(e):
                    raise
                self.out["perturb_error"] = f"{_type(e).__name__}: {str(e)[:300]}"
            return

    def integrity(self, phase: str) -> None:
        after = snapshot(extra=[self.ref_mod, _type(self.ref_model)])
        changed = diff_snapshot(self.before, after)
        if _type(self.ref_model).forward is not self.ref_forward:
            changed.append("Model.forward")
        if changed:
            self.flag("monkey_patch", f"replaced during {phase}: {', '.join(changed[:8])}")
            self.out["dirty"] = True

    # ---------------------------------------------------------------- timing
    def time_phase(self):
        from . import timing

        j = self.j
        self.out["stage"] = "timing"
        t0 = _perf()
        sets = [_clone_args(p) for p in self.pristine]
        ref_fn = self.ref_model
        cand_fn = self.cand_model
        res = timing.interleaved(C, self.dev, ref_fn, cand_fn, sets, warmup=j.warmup_iters, **_timing_kw(j),
                                 placements=j.timing_placements, reclone=_clone_args,
                                 poison=self._poison_outputs,
                                 lead_from_ref=j.timing_lead_from == "reference")
        t1 = _perf()
        last = res.pop("last_outputs")
        for i, out in last.items():
            self.save(f"timed{i}", out)
        self.out["timing"] = res
        from . import profile

        t2 = _perf()
        self.out["kernels"] = profile.profile_kernels(C, self.dev, cand_fn, sets[0])
        self.out["worker_seconds"] = {"timed_pairs": t1 - t0, "save_timed": t2 - t1, "profile": _perf() - t2}

    def baseline(self):
        """Clean timings of the reference alone: eager and torch.compile (no candidate loaded)."""
        from . import timing

        j = self.j
        self.ref_mod = _exec_source(j.task_source, "dvk_reference")
        init = self.init_args(self.ref_mod)
        model = self.build(self.ref_mod, "Model", init)
        sets = [self.gen_inputs(self.ref_mod, s) for s in j.seeds]
        res = {"eager_ms": timing.solo(C, self.dev, model, sets, warmup=j.warmup_iters, **_timing_kw(j))}
        if j.baseline_compile:
            try:
                compiled = self.torch.compile(model)
                res["compile_ms"] = timing.solo(C, self.dev, compiled, sets, warmup=max(3, j.warmup_iters),
                                                **_timing_kw(j))
            except Exception as e:  # noqa: BLE001 - compile baseline optional
                res["compile_error"] = f"{_type(e).__name__}: {str(e)[:200]}"
        return res


def _timing_kw(j) -> dict:
    """The timing settings of a job, as ``timing.interleaved`` / ``timing.solo`` take them."""
    return {"iters": j.timing_iters, "flush_mb": j.l2_flush_mb, "max_iters": j.timing_max_iters,
            "budget_s": j.timing_budget_s, "lead_us": j.timing_lead_us,
            "warmup_ms": j.timing_warmup_ms, "hold": j.timing_flush == "hold"}


def _threads():
    import threading

    return [t.ident for t in threading.enumerate() if t.is_alive()]


def _outliving(before: set) -> list:
    """Names of threads started since ``before`` and still alive: work may be left running
    behind the returned output. No grace period: waiting would let such work finish."""
    import threading

    return [f"{t.name} ({_type(t).__name__})" for t in threading.enumerate()
            if t.is_alive() and t.ident not in before]


def _children() -> set:
    try:
        pid = os.getpid()
        out = set()
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.update(fh.read().split())
        return out
    except OSError:
        return set()


# --------------------------------------------------------------------------- loop
def _run_job(job: dict, conn) -> dict:
    r = Runner(job, conn)
    cuda_broken = False
    try:
        r.reference_phase()
    except BaseException as e:  # noqa: BLE001 - a broken reference is the task's fault, reported as such
        return {"stage": "reference", "error_kind": "reference_error",
                "error_msg": _trim_traceback(e, None), "flags": [], "notes": [], "leaves": {},
                "cuda_broken": _is_cuda_error(e)}
    conn.send({"event": "ref_done", "ref_work": r.out.get("ref_work")})
    ok = r.load_candidate()
    conn.send({"event": "loaded", "ok": ok})
    if ok:
        try:
            r.check_phase()
        except BaseException as e:  # noqa: BLE001
            cuda_broken = _is_cuda_error(e)
            r.out.update(stage="correctness", error_kind="cuda_error" if cuda_broken else "runtime_error",
                         error_msg=_trim_traceback(e, r.cand_file))
        if not cuda_broken:
            r.integrity("correctness")
    r.out["cuda_broken"] = r.out.get("cuda_broken") or cuda_broken
    conn.send({"event": "checked", "result": r.out})
    if not ok or r.out.get("cuda_broken"):
        return None
    cmd = _answer_samples(r, conn)
    if cmd.get("cmd") == "time":
        r.out["leaves"] = {}
        try:
            r.time_phase()
        except BaseException as e:  # noqa: BLE001
            cb = _is_cuda_error(e)
            r.out.update(stage="timing", error_kind="cuda_error" if cb else "runtime_error",
                         error_msg=_trim_traceback(e, r.cand_file), cuda_broken=cb)
        if not r.out.get("cuda_broken"):
            r.integrity("timing")
        conn.send({"event": "timed", "result": r.out})
        _answer_samples(r, conn)
    sys.modules.pop(f"dvk_candidate_{r.j.job_id}", None)
    return None


def _answer_samples(r: "Runner", conn) -> dict:
    """Serve sample requests until the harness sends its next command."""
    while True:
        cmd = conn.recv()
        if cmd.get("cmd") != "sample":
            return cmd
        leaves, secs = r.send_samples(int(cmd["seed"]))
        conn.send({"event": "sampled", "leaves": leaves, "seconds": secs})


def _build_flush_hold(torch, device: str):
    """The whole-GPU flush kernel (occupy.py), built and checked before any candidate is
    imported; ``(None, why)`` where it cannot be (then timing uses fill_ and _sleep)."""
    try:
        from .occupy import FlushHold

        hold = FlushHold(torch, device)
        buf = torch.empty(64 << 20, dtype=torch.int32, device=device)  # 256 MB, as the default flush
        print("flush kernel:", hold.self_check(torch, buf), flush=True)
        del buf
        return hold, None
    except Exception as e:  # noqa: BLE001 - any failure means the fallback
        print(f"flush kernel unavailable: {type(e).__name__}: {e}", flush=True)
        return None, f"{type(e).__name__}: {str(e)[:200]}"


def no_background_threads() -> None:
    """Libraries the harness itself uses must not start threads on their own later (a
    candidate would be flagged for them): tqdm's monitor thread, which inductor's progress
    bars start, is switched off. Inductor's compile pool is kept off by the worker's
    environment (``pool.default_env``)."""
    try:
        import tqdm

        tqdm.tqdm.monitor_interval = 0
    except ImportError:
        pass


def main(conn, device: str, env: dict, log_path: str) -> None:
    """Worker entry point (spawned). Sets the environment before torch/triton load."""
    global C
    os.environ.update(env)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    no_background_threads()
    import torch

    C = _capture(torch)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        torch.empty(1, device=device)  # create the context now, not inside the first timing
    try:
        import triton  # noqa: F401 - loaded here so candidates' imports are cheap
    except ImportError:
        pass
    if device.startswith("cuda"):
        C.flush_hold, C.flush_hold_error = _build_flush_hold(torch, device)
    _install_launch_counter()
    # Load lazily-imported machinery now (dynamo wraps torch.manual_seed on first use of
    # a dispatch mode), so later snapshots see a settled torch.
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False), _make_audit(torch)():
        torch.relu(torch.ones(2, device=device) @ torch.ones(2, 2, device=device))
    torch.manual_seed(0)
    gpu = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"
    _gc.collect()
    _gc.freeze()  # all loaded so far lives as long as the process (see the end of each job)
    conn.send({"event": "ready", "pid": os.getpid(), "gpu": gpu, "torch": torch.__version__})
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        cmd = msg.get("cmd")
        if cmd == "stop":
            return
        if cmd == "job":
            reply = _run_job(msg["job"], conn)
            if reply is not None:
                conn.send({"event": "checked", "result": reply})
        elif cmd == "baseline":
            try:
                r = Runner(msg["job"], conn)
                conn.send({"event": "baseline", "result": r.baseline()})
            except BaseException as e:  # noqa: BLE001
                conn.send({"event": "baseline", "result": {"error": _trim_traceback(e, None)}})
        # Free the job's cycles, then freeze the survivors (imports, caches): the next
        # collection scans only the next job's objects (a full scan took ~0.15 s per job).
        # Garbage that forms later among frozen objects waits for the worker's recycling.
        _gc.collect()
        _gc.freeze()
        if C.cuda_available and device.startswith("cuda"):
            C.empty_cache()
