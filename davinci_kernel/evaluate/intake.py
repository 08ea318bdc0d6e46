"""Reading a worker's output files into the harness, trusting nothing but their bytes.

Covers: checking each announced leaf (known dtype, a shape of non-negative integers, a
plain file name in the worker's output folder, a regular file with one link, owned by
the worker's uid, of exactly the announced size; never a symlink), reading it while the
worker's whole process tree is stopped, and removing it. Outputs larger than
``SAMPLE_MIN`` elements are compared on a stratified sample whose seed the harness drew
and never sent: the worker has committed to the whole file before anyone knows which
elements count (the seed belongs to the reference entry: the reference process keeps only
those elements of a large output). A leaf that fails a check becomes ``{"kind": "invalid", "why": ...}``,
which the comparison rejects. Also the reference process's files (trusted, in a folder
only the harness can reach): mapped, not copied. Does not cover: comparing (``correctness.py``).
"""

from __future__ import annotations

import math
import os
import re
import stat
from typing import Optional

import torch

from .transfer import SAMPLE_MIN, sample_indices

_NAME = re.compile(r"^[0-9]{1,9}\.bin$")
_MAX_DIMS = 16


def _dtype(name) -> Optional[torch.dtype]:
    dt = getattr(torch, name, None) if isinstance(name, str) and name.isidentifier() else None
    return dt if isinstance(dt, torch.dtype) else None


def _shape(shape) -> Optional[tuple]:
    if not isinstance(shape, list) or len(shape) > _MAX_DIMS:
        return None
    if not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < (1 << 48) for s in shape):
        return None
    return tuple(shape)


def check_leaf(folder: str, meta, owner_uid: Optional[int]) -> tuple[Optional[dict], Optional[str]]:
    """(meta with a checked ``path``, None) or (None, why it is refused)."""
    if not isinstance(meta, dict):
        return None, "not a leaf description"
    kind = meta.get("kind")
    if kind == "scalar":
        v = meta.get("value")
        if v is None or isinstance(v, (bool, int, float, str)):
            return {"kind": "scalar", "value": v}, None
        return None, "a scalar of an unknown type"
    if kind == "unsupported":
        shape = _shape(meta.get("shape")) or ()
        why = meta.get("why")
        return {"kind": "unsupported", "dtype": str(meta.get("dtype", meta.get("type", "?")))[:40], "shape": list(shape),
                **({"why": why[:200]} if isinstance(why, str) else {})}, None
    if kind != "tensor":
        return None, f"unknown leaf kind {str(kind)[:40]!r}"
    dt, shape, name = _dtype(meta.get("dtype")), _shape(meta.get("shape")), meta.get("file")
    if dt is None or shape is None:
        return None, "a tensor with an unknown dtype or a malformed shape"
    if not isinstance(name, str) or not _NAME.match(name):
        return None, "an output file name outside the worker's folder"
    path = os.path.join(folder, name)
    try:
        st = os.lstat(path)
    except OSError:
        return None, "an announced output file is missing"
    want = math.prod(shape) * dt.itemsize
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        return None, "an output file that is not a plain file"
    if owner_uid is not None and st.st_uid != owner_uid:
        return None, "an output file the worker does not own"
    if st.st_size != want:
        return None, f"an output file of {st.st_size} bytes where {want} were announced"
    return {"kind": "tensor", "dtype": dt, "shape": shape, "path": path}, None


def read_file_tensor(path: str, dtype: torch.dtype, shape: tuple, indices=None, mapped: bool = False):
    """The tensor in a raw-byte file: whole (a copy, or ``mapped`` copy-on-write), or the
    elements at ``indices`` (a copy)."""
    n = math.prod(shape)
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    flat = torch.from_file(path, shared=False, size=n, dtype=dtype)
    if indices is not None:
        return flat[indices].clone()
    return flat.reshape(shape) if mapped else flat.clone().reshape(shape)


def read_leaves(folder: str, metas, owner_uid: Optional[int], sample_seed: int) -> list:
    """A worker's announced leaves as plain CPU tensors, samples or descriptions (copies:
    the worker writes its next output into the same files, which go with its scratch)."""
    if not isinstance(metas, list) or len(metas) > 4096:
        return [{"kind": "invalid", "why": "the output list is malformed"}]
    leaves = []
    for meta in metas:
        checked, why = check_leaf(folder, meta, owner_uid)
        if checked is None:
            leaves.append({"kind": "invalid", "why": why})
            continue
        if checked["kind"] != "tensor":
            leaves.append(checked)
            continue
        dt, shape, path = checked["dtype"], checked["shape"], checked["path"]
        n = math.prod(shape)
        if n > SAMPLE_MIN:
            idx = sample_indices(torch, n, sample_seed)
            leaves.append({"values": read_file_tensor(path, dt, shape, idx), "seed": sample_seed,
                           "full_shape": list(shape)})
        else:
            leaves.append(read_file_tensor(path, dt, shape))
    return leaves


def read_reference(folder: str, metas: list) -> list:
    """The reference process's leaves (trusted files in the harness's own folder), mapped."""
    leaves = []
    for meta in metas:
        if meta.get("kind") != "tensor":
            leaves.append(meta)
            continue
        dt = _dtype(meta["dtype"])
        t = read_file_tensor(os.path.join(folder, meta["file"]), dt, tuple(meta["shape"]), mapped=True)
        if meta.get("sampled"):  # a large output kept as its values at the entry's secret indices
            leaves.append({"values": t, "seed": meta["seed"], "full_shape": list(meta["full_shape"])})
        else:
            leaves.append(t)
    return leaves
