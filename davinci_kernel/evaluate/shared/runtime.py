"""What both kinds of worker process do: start, load a source, build models, make inputs,
write outputs as raw bytes.

Covers: the worker start (environment and sandbox before torch loads, the device, the
whole-GPU flush kernel, a "ready" message), the torch callables captured before any
other code runs (``C``), executing a problem or candidate source as a module, seeded
inputs and models on the device, allocator poison, writing output leaves as files of raw
bytes for the harness, and error text. Used by ``reference.py`` (the trusted process that
never imports a candidate) and ``candidate.py`` (one candidate, sandboxed, then discarded).
Does not cover: judging anything (the harness does that, ``judge.py``).
"""

from __future__ import annotations

import json
import os
import sys
import traceback

_isinstance = isinstance
_type = type


class Captured:
    """Torch callables captured at start, before any problem or candidate code exists."""

    def __init__(self, torch):
        import time

        self.perf = time.perf_counter
        self.torch = torch
        self.Tensor = torch.Tensor
        self.clone = torch.Tensor.clone
        self.copy_ = torch.Tensor.copy_
        self.fill_ = torch.Tensor.fill_
        self.data_ptr = torch.Tensor.data_ptr
        self.untyped_storage = torch.Tensor.untyped_storage
        self.equal = torch.equal
        self.empty = torch.empty
        self.no_grad = torch.no_grad
        self.manual_seed = torch.manual_seed
        self.cuda_available = torch.cuda.is_available()
        self.flush_hold, self.flush_hold_error = None, None
        if self.cuda_available:
            self.sync = torch.cuda.synchronize
            self.Event = torch.cuda.Event
            self.record = torch.cuda.Event.record
            self.elapsed = torch.cuda.Event.elapsed_time
            self.empty_cache = torch.cuda.empty_cache
            self.sleep = getattr(torch.cuda, "_sleep", None)


C: Captured = None  # type: ignore[assignment]  # set by start()


def start(argv: list[str]):
    """Common worker start. ``argv``: [channel fd, JSON of {device, env, spec|null}].
    Returns (channel, device, notes). The sandbox is entered before torch is imported."""
    global C
    from .protocol import Channel

    fd, conf = int(argv[0]), json.loads(argv[1])
    from . import worker_world

    lock = (conf.get("spec") or {}).get("lock_fd")
    # both start paths: every signal default and unblocked, only the channel (and the uid lock) open
    worker_world.begin([fd] + ([lock] if isinstance(lock, int) else []))
    device = conf["device"]
    os.environ.update(conf.get("env") or {})
    notes: list[str] = []
    if conf.get("spec"):
        from .sandbox_enter import Spec, enter

        notes = enter(Spec(**conf["spec"]))
    ch = Channel.from_fd(fd)
    no_background_threads()
    import torch

    C = Captured(torch)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
        torch.empty(1, device=device)  # the context now, not inside the first timing
    try:
        import triton  # noqa: F401 - loaded here so a source's import is cheap
    except ImportError:
        pass
    if device.startswith("cuda") and conf.get("flush_hold", True):
        C.flush_hold, C.flush_hold_error = build_flush_hold(torch, device)
    return ch, device, notes


def no_background_threads() -> None:
    """Libraries the worker uses must not start threads of their own later (a candidate
    would be flagged for them): tqdm's monitor thread (inductor's progress bars) is off."""
    try:
        import tqdm

        tqdm.tqdm.monitor_interval = 0
    except ImportError:
        pass


def build_flush_hold(torch, device: str):
    """The whole-GPU flush kernel (occupy.py), built and checked at start;
    ``(None, why)`` where it cannot be (timing then uses fill_ and _sleep)."""
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


def gpu_name(device: str) -> str:
    torch = C.torch
    return torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"


# --------------------------------------------------------------------------- sources and models
NATIVE_REFUSED = ("native code (torch.utils.cpp_extension) is built only on a GPU worker: on the CPU a "
                  "candidate's kernels are Triton, run by its interpreter")


def no_native_builds() -> None:
    """A CPU worker, before its candidate is imported: torch's C++ extension builders raise,
    under whatever name the candidate imports them (the static check refuses native code on
    the CPU; this holds if a spelling slips past it)."""
    import torch.utils.cpp_extension as ce

    def refused(*args, **kwargs):
        raise RuntimeError(NATIVE_REFUSED)

    for name in ("load_inline", "load", "CppExtension", "CUDAExtension", "BuildExtension"):
        if hasattr(ce, name):
            setattr(ce, name, refused)


def exec_source(source: str, name: str, path: str | None = None):
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


def to_device(x, dev):
    if _isinstance(x, C.Tensor):
        return x.to(dev) if x.device != dev else x
    if _isinstance(x, (list, tuple)):
        return _type(x)(to_device(v, dev) for v in x)
    return x


def clone_args(args):
    return [C.clone(a) if _isinstance(a, C.Tensor) else a for a in args]


def tensor_leaves(x):
    from .transfer import flatten

    return [v for v in flatten(x) if issubclass(type(v), C.Tensor)]


def gen_inputs(mod, seed: int, dev):
    with C.torch.device(dev):
        C.manual_seed(seed)
        inputs = mod.get_inputs()
    return [to_device(x, dev) for x in inputs]


def seed_call(seed: int) -> None:
    """Start the random stream of one forward call from ``seed``: the harness's secret call
    seed for a compared call (``draws.Draw.call_seeds``: the same on both sides, so a
    reference that draws random numbers in forward, dropout in training mode, gives the
    same outputs for the same call every time), a fresh secret one for any other. The
    seed is used as it is: it was drawn on its own, so ``torch.initial_seed()`` tells a
    candidate nothing about its inputs."""
    C.manual_seed(seed)


def init_args(mod, init_seed: int, dev):
    with C.torch.device(dev):
        C.manual_seed(init_seed)
        return [to_device(x, dev) for x in mod.get_init_inputs()]


def build(mod, cls_name: str, init, init_seed: int, dev):
    torch = C.torch
    with torch.device(dev):
        C.manual_seed(init_seed)
        model = getattr(mod, cls_name)(*init)
    if _isinstance(model, torch.nn.Module):
        model = model.to(dev)
    return model


def poison(metas, value: float, dev) -> None:
    """Fill freed allocator blocks of the expected output sizes, so unwritten output memory shows."""
    torch = C.torch
    blocks = []
    for m in metas or []:
        if m.get("kind") != "tensor":
            continue
        n = 1
        for s in m["shape"]:
            n *= s
        dt = getattr(torch, m["dtype"], None)
        if not _isinstance(dt, torch.dtype) or dt.is_complex:
            continue
        t = C.empty(max(n, 1), dtype=dt, device=dev)
        if dt.is_floating_point:
            C.fill_(t, value)
        else:
            C.fill_(t, 0x5A5A if dt not in (torch.bool, torch.uint8, torch.int8) else 0x5A)
        blocks.append(t)
    del blocks


def poison_outputs(out) -> None:
    for t in tensor_leaves(out):
        if t.dtype.is_floating_point:
            try:
                C.fill_(t, float("nan"))
            except RuntimeError:
                pass


def aliases(out, args) -> bool:
    """True when an output lives in an input's memory."""
    ranges = []
    for a in args:
        if _isinstance(a, C.Tensor) and a.numel() > 0:
            st = C.untyped_storage(a)
            ranges.append((st.data_ptr(), st.data_ptr() + st.nbytes()))
    for t in tensor_leaves(out):
        if type(t) is not C.Tensor or t.numel() == 0:  # a subclass is flagged as such; its methods are its own code
            continue
        p = C.data_ptr(t)
        if any(lo <= p < hi for lo, hi in ranges):
            return True
    return False


def mutated(args, pristine) -> bool:
    return any(_isinstance(a, C.Tensor) and not C.equal(a, b) for a, b in zip(args, pristine))


class OutputWriter:
    """Writes output leaves as raw-byte files into one folder; metas name them relatively.

    ``reuse`` (a candidate worker): the i-th leaf of every output goes to the same file,
    kept mapped, so outputs after the first fill pages that are already there. The harness
    reads each output while the worker is stopped, before it may write the next."""

    def __init__(self, folder: str, reuse: bool = False):
        self.folder = folder
        self.n = 0
        self.maps: dict | None = {} if reuse else None

    def write(self, output, sample_seed: int | None = None) -> list[dict]:
        """One file per leaf. With ``sample_seed`` (the trusted reference process only), a
        leaf above ``SAMPLE_MIN`` elements is written as its values at that seed's indices."""
        from .transfer import SAMPLE_MIN, flatten, sample_indices, write_leaf

        metas = []
        for i, leaf in enumerate(flatten(output)):
            self.n += 1
            name = f"{i}.bin" if self.maps is not None else f"{self.n}.bin"
            sampled = sample_seed is not None and issubclass(type(leaf), C.Tensor) and leaf.numel() > SAMPLE_MIN
            if sampled:
                idx = sample_indices(C.torch, leaf.numel(), sample_seed).to(leaf.device)
                meta = write_leaf(C.torch, leaf.reshape(-1)[idx], os.path.join(self.folder, name))
                meta.update(sampled=True, seed=sample_seed, full_shape=list(leaf.shape))
            else:
                meta = write_leaf(C.torch, leaf, os.path.join(self.folder, name), self.maps)
            if meta.get("kind") == "tensor":
                meta.pop("path", None)
                meta["file"] = name
            metas.append(meta)
        return metas


# --------------------------------------------------------------------------- errors
def is_cuda_error(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    keys = ("CUDA error", "illegal memory access", "device-side assert", "cudaError", "CUDA_ERROR",
            "misaligned address", "unspecified launch failure", "an illegal instruction")
    return any(k in text for k in keys)


def trim_traceback(exc: BaseException, source_file: str | None) -> str:
    """Error text with the source's own frames and the last lines that say what failed."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    text = "".join(lines)
    keep = [b.replace(source_file, "candidate.py") for b in lines[1:-1] if source_file and source_file in b]
    msg = lines[-1].strip()
    if "Error building extension" in text or "ninja" in text:
        errs = [ln for ln in text.splitlines() if " error" in ln or "error:" in ln]
        msg = "\n".join(errs[:12]) or msg
    return ("".join(keep[-3:]) + msg)[-3000:]
