"""Reading a worker's output files into the harness, trusting nothing but their bytes.

Covers: checking each announced leaf (known dtype, a shape of non-negative integers, a
plain file name in the worker's output folder, a regular file with one link, owned by
the worker's uid, of exactly the announced size, no larger than the reference's output
allows, and not sparse; never a symlink: the folder and the file are opened by this
process with ``O_NOFOLLOW``, the file relative to the folder's descriptor, and every
check is made on the open descriptor), reading it with ``pread`` (or, for a sample, a
private read-only mapping of that descriptor) while the worker's whole process tree is
stopped. A sparse file would make this process fault in pages for holes the worker never
paid for; a file larger than the reference's output, memory the worker never computed. Outputs larger than
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
import warnings
from typing import Optional

import torch

from ..shared.transfer import SAMPLE_MIN, sample_indices

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


def check_leaf(meta, owner_uid: Optional[int], dir_fd: int) -> tuple[Optional[dict], Optional[str]]:
    """(meta with an open ``fd`` of its file in the folder ``dir_fd``, checked; None) or
    (None, why it is refused). The caller closes a returned ``fd``."""
    if not isinstance(meta, dict):
        return None, "not a leaf description"
    kind = meta.get("kind")
    if kind == "scalar":
        v = meta.get("value")
        if v is None or type(v) in (bool, int, float):
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
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        st = os.fstat(fd)
    except OSError:
        return None, "an announced output file is missing (or is a link)"
    want = math.prod(shape) * dt.itemsize
    why = None
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        why = "an output file that is not a plain file"
    elif owner_uid is not None and st.st_uid != owner_uid:
        why = "an output file the worker does not own"
    elif st.st_size != want:
        why = f"an output file of {st.st_size} bytes where {want} were announced"
    elif st.st_blocks * 512 < st.st_size:
        why = "a sparse output file (holes where values should be)"
    if why is not None:
        os.close(fd)
        return None, why
    return {"kind": "tensor", "dtype": dt, "shape": shape, "fd": fd}, None


def _pread_tensor(fd: int, dtype: torch.dtype, shape: tuple, indices=None):
    """The tensor in an open raw-byte file: whole, read with ``pread``; or the elements at
    ``indices``, through a private read-only mapping (only their pages are touched)."""
    import mmap

    import numpy as np

    n = math.prod(shape)
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    nbytes = n * dtype.itemsize
    if indices is None:
        buf = bytearray(nbytes)
        view, got = memoryview(buf), 0
        while got < nbytes:
            k = os.preadv(fd, [view[got:]], got)
            if k <= 0:
                raise OSError("short read")
            got += k
        return torch.frombuffer(buf, dtype=dtype).reshape(shape)
    mm = mmap.mmap(fd, nbytes, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
    try:
        raw = np.frombuffer(mm, dtype=np.uint8)
        with warnings.catch_warnings():  # read-only pages, only read here: torch's warning says nothing
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.from_numpy(raw).view(dtype)  # no copy: the mapping's pages
        out = flat[indices].clone()
        del flat, raw
    finally:
        mm.close()
    return out


def mapped_tensor(path: str, dtype: torch.dtype, shape: tuple):
    """The tensor in a trusted raw-byte file, mapped copy-on-write (not read into memory)."""
    n = math.prod(shape)
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.from_file(path, shared=False, size=n, dtype=dtype).reshape(shape)


def read_leaves(folder: str, metas, owner_uid: Optional[int], sample_seed: int,
                max_bytes: Optional[int] = None) -> list:
    """A worker's announced leaves as plain CPU tensors, samples or descriptions (copies:
    the worker writes its next output into the same files). ``max_bytes``: the most this
    output may hold (from the reference's output); a larger announcement is refused unread."""
    if not isinstance(metas, list) or len(metas) > 4096:
        return [{"kind": "invalid", "why": "the output list is malformed"}]
    if max_bytes is not None:
        total = 0
        for m in metas:
            if not isinstance(m, dict):
                continue
            dt, shape = _dtype(m.get("dtype")), _shape(m.get("shape"))
            if m.get("kind") == "tensor" and dt is not None and shape is not None:
                total += math.prod(shape) * dt.itemsize
        if total > max_bytes:
            return [{"kind": "invalid", "why": f"an output of {total} bytes, far more than the reference's"}]
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return [{"kind": "invalid", "why": "the worker's output folder is missing or a link"}]
    leaves = []
    try:
        for meta in metas:
            checked, why = check_leaf(meta, owner_uid, dir_fd)
            if checked is None:
                leaves.append({"kind": "invalid", "why": why})
                continue
            if checked["kind"] != "tensor":
                leaves.append(checked)
                continue
            dt, shape, fd = checked["dtype"], checked["shape"], checked["fd"]
            try:
                n = math.prod(shape)
                if n > SAMPLE_MIN:
                    idx = sample_indices(torch, n, sample_seed)
                    leaves.append({"values": _pread_tensor(fd, dt, shape, idx), "seed": sample_seed,
                                   "full_shape": list(shape)})
                else:
                    leaves.append(_pread_tensor(fd, dt, shape))
            except (OSError, ValueError) as e:
                leaves.append({"kind": "invalid", "why": f"an output file could not be read: {e}"})
            finally:
                os.close(fd)
    finally:
        os.close(dir_fd)
    return leaves


def read_reference(folder: str, metas: list) -> list:
    """The reference process's leaves (trusted files in the harness's own folder), mapped."""
    leaves = []
    for meta in metas:
        if meta.get("kind") != "tensor":
            leaves.append(meta)
            continue
        dt = _dtype(meta["dtype"])
        t = mapped_tensor(os.path.join(folder, meta["file"]), dt, tuple(meta["shape"]))
        if meta.get("sampled"):  # a large output kept as its values at the entry's secret indices
            leaves.append({"values": t, "seed": meta["seed"], "full_shape": list(meta["full_shape"])})
        else:
            leaves.append(t)
    return leaves
