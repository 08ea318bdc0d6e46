"""Moving output tensors from a worker to the harness as plain bytes.

Covers: flattening a model output (tensor, tuple/list/dict of tensors, scalars) into
leaves, writing each leaf's raw bytes to a file (under /dev/shm when it exists) and
reading it back in the harness as a fresh, plain ``torch.Tensor``, for every dtype in
``_RAW`` (floating, complex, integer, bool and float8 types); any other tensor (another
dtype, sparse, quantized, nested, meta) crosses as an "unsupported" description that the
comparison rejects. The harness never
unpickles objects the candidate made: only shapes, dtype names and raw bytes cross.
Large GPU outputs (more than SAMPLE_MIN elements) stay on the GPU until the harness
names a random seed, chosen after the candidate produced them; then SAMPLE_N elements
at indices drawn from that seed cross instead of the whole tensor. Does not cover:
comparing (see correctness.py).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

# dtype name -> numpy dtype of its raw bytes. A type numpy lacks travels as bytes of the
# same size and is viewed back on arrival: bfloat16 as int16, float8 types as uint8,
# complex32 as two float16. Anything else (other dtypes, sparse, quantized, nested or meta
# tensors) crosses as an "unsupported" description, which correctness.compare rejects.
_RAW = {
    "float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": np.int16,
    "complex128": np.complex128, "complex64": np.complex64, "complex32": np.float16,
    "int64": np.int64, "int32": np.int32, "int16": np.int16, "int8": np.int8,
    "uint64": np.uint64, "uint32": np.uint32, "uint16": np.uint16, "uint8": np.uint8, "bool": np.bool_,
    "float8_e4m3fn": np.uint8, "float8_e4m3fnuz": np.uint8, "float8_e5m2": np.uint8,
    "float8_e5m2fnuz": np.uint8, "float8_e8m0fnu": np.uint8,
}


def _unsupported(torch, t) -> str | None:
    """Why a tensor cannot cross as raw bytes, or None."""
    if t.is_nested:
        return "a nested tensor"
    if t.layout != torch.strided:
        return f"a tensor with layout {str(t.layout).replace('torch.', '')} (only dense tensors are compared)"
    if t.is_quantized:
        return f"a quantized tensor ({str(t.dtype).replace('torch.', '')})"
    if t.device.type == "meta":
        return "a meta tensor (it holds no values)"
    return None


def flatten(out: Any) -> list[Any]:
    """Leaves of an output in a fixed order (dict keys sorted), without running any code of
    the output's own: only exact lists, tuples and dicts (and torch's structseq results such
    as ``torch.return_types.max``) are walked, through the built-in methods of their base
    types, and only dicts whose keys are exact ``str``/``int``; any other container (a list
    subclass whose ``__iter__`` computes, a key whose ``__str__`` does) is one leaf, which
    crosses as "unsupported". Types are read with ``type()``, never ``isinstance`` (which
    asks an object's own ``__class__``)."""
    t = type(out)
    if t is list or t is tuple or _structseq(t):
        leaves = []
        for o in (list.__iter__(out) if t is list else tuple.__iter__(out)):
            leaves += flatten(o)
        return leaves
    if t is dict:
        keys = list(dict.keys(out))
        if not all(type(k) in (str, int) for k in keys):
            return [out]
        leaves = []
        for k in sorted(keys, key=str):
            leaves += flatten(dict.__getitem__(out, k))
        return leaves
    return [out]


def _structseq(t: type) -> bool:
    """A result type of torch's own ops (``torch.return_types.*``): a tuple subclass made in C."""
    return tuple in t.__mro__ and t.__module__ == "torch.return_types"


def plain_tensor(torch, x) -> bool:
    """``x`` is exactly a ``torch.Tensor`` (or an ``nn.Parameter``): no subclass whose methods
    could run a candidate's code."""
    return type(x) is torch.Tensor or type(x) is torch.nn.Parameter


def write_leaf(torch, leaf, path: str, maps: dict | None = None) -> dict:
    """Worker side: one leaf → a file of raw bytes + a small description.

    ``maps`` (path → ((numel, dtype), mapped tensor)) keeps each file mapped for the next
    leaf written to the same path: a later output of the same size is copied into pages
    that are already there. A fresh page of /dev/shm costs a fault and zeroing, which held
    the device-to-file copy to about 1.1 GB/s on the H200 (bench/results/transfer_h200.json):
    9 s for each trial of a 10 GB output."""
    if not issubclass(type(leaf), torch.Tensor):
        if leaf is None or type(leaf) in (int, float, bool):
            return {"kind": "scalar", "value": leaf}
        return {"kind": "unsupported", "type": _type_name(leaf)}
    if not plain_tensor(torch, leaf):  # its methods (detach, copy_) would run its own code
        return {"kind": "unsupported", "type": _type_name(leaf), "why": "a tensor subclass, not a plain torch.Tensor"}
    t = torch.Tensor.detach(leaf)
    name = str(t.dtype).replace("torch.", "")
    why = _unsupported(torch, t)
    if name not in _RAW or why:
        return {"kind": "unsupported", "dtype": name, "shape": list(t.shape), "why": why}
    t = t.resolve_conj().resolve_neg()  # conjugate/negative views as plain values
    meta = {"kind": "tensor", "dtype": name, "shape": list(t.shape), "path": path}
    n = t.numel()
    if n:
        try:  # one copy, device → the file's own pages: 16-25 % faster than through a host
            # tensor and write() on the H200 (bench/results/transfer_h200.json)
            dst = _mapped(torch, path, n, t.dtype, maps)
            dst.copy_(t.reshape(-1))
            del dst
            return meta
        except (RuntimeError, TypeError, OSError):
            pass  # the plain way below
    cpu = t.to("cpu", copy=True).contiguous()
    flat = cpu.reshape(-1)
    raw = torch.from_numpy(np.empty(0, dtype=_RAW[name])).dtype
    if flat.dtype != raw:  # bfloat16, float8, complex32: the same bytes as a type numpy has
        flat = flat.view(raw)
    arr = flat.numpy()
    with open(path, "wb") as fh:
        arr.tofile(fh)
    return meta


def _type_name(x) -> str:
    """The name of ``x``'s type, read from the type object itself (no code of ``x`` runs)."""
    name = type.__dict__["__name__"].__get__(type(x))
    return name[:60] if type(name) is str else "?"


def _mapped(torch, path: str, n: int, dtype, maps: dict | None):
    """A shared mapping of ``path`` holding exactly ``n`` elements of ``dtype``: the one kept
    in ``maps`` when it has that size, else a new one (the file cut or grown to size)."""
    kept = maps.pop(path, None) if maps is not None else None
    if kept is not None and kept[0] == (n, dtype) and os.path.exists(path):
        maps[path] = kept
        return kept[1]
    del kept  # another size: its mapping goes before the file is resized
    if os.path.exists(path):
        os.truncate(path, n * dtype.itemsize)
    dst = torch.from_file(path, shared=True, size=n, dtype=dtype)
    if maps is not None:
        maps[path] = ((n, dtype), dst)
    return dst


def read_leaf(meta: dict, mapped: bool = False):
    """Harness side: a description → a plain CPU tensor (or the scalar).

    ``mapped``: the tensor maps the file copy-on-write (``torch.from_file``, private)
    instead of reading it: no copy and no fresh memory for a large cached reference,
    as long as the file stays (its pages are the tensor's)."""
    import torch

    if meta["kind"] != "tensor":
        return meta
    if not isinstance(meta.get("dtype"), str) or meta["dtype"] not in _RAW:  # never carried: compare() rejects the description
        return {"kind": "unsupported", "dtype": str(meta.get("dtype")), "shape": list(meta.get("shape") or [])}
    if meta.get("sampled"):
        return {"values": read_leaf({k: v for k, v in meta.items() if k != "sampled"}),
                "seed": meta["seed"], "full_shape": meta["full_shape"]}
    if mapped:
        n = math.prod(meta["shape"])
        if n == 0:
            return torch.empty(meta["shape"], dtype=getattr(torch, meta["dtype"]))
        t = torch.from_file(meta["path"], shared=False, size=n, dtype=getattr(torch, meta["dtype"]))
        return t.reshape(meta["shape"])
    raw = np.fromfile(meta["path"], dtype=_RAW[meta["dtype"]])
    t = torch.from_numpy(raw)  # a fresh array nobody else holds: no second copy
    want = getattr(torch, meta["dtype"])
    if t.dtype != want:  # bytes of a type numpy lacks (complex32: two float16 per value)
        t = t.view(want)
    return t.reshape(meta["shape"])


SAMPLE_MIN = 1 << 22  # GPU outputs above this many elements are checked on a sample
SAMPLE_N = 1 << 20  # elements per sampled output


def sample_indices(torch, numel: int, seed: int, n: int = SAMPLE_N):
    """The same flat indices in worker and harness (numpy's PCG64, seed chosen by the harness).

    Stratified: [0, numel) is cut into ``n`` equal strata and one random index is drawn in
    each, so every region of the output wider than two strata holds a sample (a wrong tile
    cannot slip between independent draws), and the indices come out sorted, which makes
    gathering them from a large tensor several times faster than random order. In numpy,
    one thread: beside busy GPU workers torch's thread pool made this 10 ms draw take
    0.2 s. In float64, whose integers are exact below 2**53: the stratum bounds are exact
    while numel * n stays below that and n is a power of two (SAMPLE_N is)."""
    if numel <= n:
        return torch.arange(numel)
    edges = np.floor(np.arange(n + 1, dtype=np.float64) * numel / n)  # (n+1,) stratum bounds
    width = edges[1:] - edges[:-1]  # (n,) >= 1
    u = np.random.default_rng(seed).random(n)  # (n,) in [0, 1)
    off = np.minimum(np.floor(u * width), width - 1)  # (n,) in [0, width)
    return torch.from_numpy((edges[:-1] + off).astype(np.int64))  # (n,) sorted


def shm_root() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
