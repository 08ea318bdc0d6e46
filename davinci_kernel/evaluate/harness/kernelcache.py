"""Triton's compile cache for workers that each live for one candidate.

Covers: a fresh worker has an empty Triton cache in its scratch folder, so it would build
everything again: the C launcher stubs (gcc), the whole-GPU flush kernel of its start-up
and every kernel of its candidate. Two stores held by the harness, in a folder no worker
can open, fill that cache before a worker needs it:

- the *seed*: what a reference process (trusted, never ran a candidate) built at its
  start-up, copied into every new worker's cache before it starts;
- *per source*: what a worker built for its candidate, copied out after the candidate ran
  and given only to a later worker of the very same source (a re-verification, a re-timing,
  the same sample drawn twice). A candidate can put anything in its own cache, so its files
  can only ever reach a process running its own code again: they never meet another
  candidate or the harness. Copied out only while the worker is stopped, and only regular
  files it owns with one link each (no symlink or hard link can make the harness copy a
  file of its own), within size limits.

Does not cover: Triton's cache format (files are copied as they are, two levels deep) or
other caches (inductor, torch extensions stay empty in each worker).
"""

from __future__ import annotations

import collections
import hashlib
import os
import shutil
import stat
import threading
from typing import Optional

MAX_FILE = 64 << 20  # bytes of one cached file
MAX_TOTAL = 64 << 20  # bytes of one cache copied out of a worker
MAX_FILES = 2000
MAX_SOURCES = 64  # per-source caches kept (the oldest go first): at most 4 GB, in practice MBs each


def source_key(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def copy_checked(src: str, dst: str, owner: Optional[int], skip: frozenset = frozenset()) -> int:
    """Copy the cache at ``src`` (two levels: entries, their files) to ``dst``, taking only
    real folders and regular files with one link (and, with ``owner``, owned by that uid),
    and no entry named in ``skip``. Returns the bytes copied; stops at the limits."""
    total = files = 0
    os.makedirs(dst, mode=0o700, exist_ok=True)
    try:
        entries = sorted(os.listdir(src))
    except OSError:
        return 0
    for entry in entries:
        if entry in skip:
            continue
        sub = os.path.join(src, entry)
        if not _real_dir(sub, owner):
            continue
        try:
            names = sorted(os.listdir(sub))
        except OSError:
            continue
        out = os.path.join(dst, entry)
        for name in names:
            if files >= MAX_FILES:
                return total
            got = _copy_file(os.path.join(sub, name), os.path.join(out, name), owner, MAX_TOTAL - total)
            if got is not None:
                total += got
                files += 1
    return total


def _real_dir(path: str, owner: Optional[int]) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and (owner is None or st.st_uid == owner)


def _copy_file(src: str, dst: str, owner: Optional[int], room: int) -> Optional[int]:
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or (owner is not None and st.st_uid != owner)
                or st.st_size > min(MAX_FILE, room)):
            return None
        os.makedirs(os.path.dirname(dst), mode=0o700, exist_ok=True)
        with os.fdopen(os.dup(fd), "rb") as fin, open(dst, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
        return st.st_size
    except OSError:
        return None
    finally:
        os.close(fd)


def give(src: str, dst: str, uid: Optional[int]) -> None:
    """Copy a stored cache into a worker's cache folder, owned by the worker."""
    for base, _dirs, files in os.walk(src):
        rel = os.path.relpath(base, src)
        target = dst if rel == "." else os.path.join(dst, rel)
        os.makedirs(target, exist_ok=True)
        if uid is not None:
            os.chown(target, uid, uid)
        for name in files:
            out = os.path.join(target, name)
            if os.path.exists(out):
                continue
            shutil.copyfile(os.path.join(base, name), out)
            if uid is not None:
                os.chown(out, uid, uid)


class KernelCache:
    """The seed and the per-source stores, under ``root`` (a folder only the harness opens)."""

    def __init__(self, root: str):
        self.root = root
        os.makedirs(root, mode=0o700, exist_ok=True)
        self.seed_dir: Optional[str] = None
        self._lock = threading.Lock()
        self._sources: collections.OrderedDict[str, str] = collections.OrderedDict()

    def set_seed(self, trusted_cache: str) -> None:
        """Take the cache a reference process built at start-up as every new worker's seed."""
        with self._lock:
            if self.seed_dir is not None:
                return
            dst = os.path.join(self.root, "seed")
            copy_checked(trusted_cache, dst, owner=None)
            self.seed_dir = dst

    def seed(self, worker_cache: str, uid: Optional[int]) -> None:
        if self.seed_dir is not None:
            give(self.seed_dir, worker_cache, uid)

    def give(self, key: str, worker_cache: str, uid: Optional[int]) -> None:
        """Fill a worker's cache with what an earlier worker built for the same source."""
        with self._lock:
            src = self._sources.get(key)
            if src is not None:
                self._sources.move_to_end(key)
        if src is not None:
            give(src, worker_cache, uid)

    def keep(self, key: str, worker_cache: str, uid: Optional[int]) -> None:
        """Copy a stopped worker's cache out for later workers of the same source."""
        with self._lock:
            if key in self._sources:
                return
        dst = os.path.join(self.root, key)
        seeded = frozenset(os.listdir(self.seed_dir)) if self.seed_dir is not None else frozenset()
        if copy_checked(worker_cache, dst, owner=uid, skip=seeded) == 0:  # every worker has the seed already
            shutil.rmtree(dst, ignore_errors=True)
            return
        with self._lock:
            self._sources[key] = dst
            while len(self._sources) > MAX_SOURCES:
                _, old = self._sources.popitem(last=False)
                shutil.rmtree(old, ignore_errors=True)
