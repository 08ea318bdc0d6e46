"""Advisory file locks (the OS's ``flock``): one command at a time in a run folder, one
writer at a time of a shared cache file.

Covers: ``hold(lock_file, what)`` — an exclusive lock on ``lock_file`` (created when missing)
for the length of a ``with`` block. By default a lock another process holds is refused at
once with a one-line ``Busy`` (a ``UsageError``: exit 2) naming that process; ``wait=True``
blocks until it is free instead (for short critical sections such as a cache update). The
lock file records the holder's pid and command so the refusal can name it; it is left in
place on release (deleting it would let two processes lock two different files).
A lock dies with its process, so a killed command never leaves a folder locked.
Does not cover: what the lock protects (``rundir.claim`` for run folders).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from .errors import UsageError


class Busy(UsageError):
    """The lock is held by another process (the message names it and says what to do)."""


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 512).decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return text.splitlines()[0] if text else ""


def _note(fd: int) -> None:
    """Record who holds the lock (pid and command), for the next one's refusal."""
    line = f"pid {os.getpid()}: {' '.join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))}"
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, line[:400].encode("utf-8", "replace") + b"\n", 0)
    except OSError:
        pass


@contextlib.contextmanager
def hold(lock_file: str | os.PathLike, what: str, wait: bool = False) -> Iterator[None]:
    """An exclusive lock on ``lock_file`` while the block runs. Held by another process:
    ``Busy`` (``what`` names the thing locked in the message) unless ``wait``."""
    path = Path(lock_file)
    for _ in range(5):  # the file may be removed under us (rundir.claim cleans up): lock the one that is there
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            who = _holder(fd)
            os.close(fd)
            by = f" ({who})" if who else ""
            raise Busy(f"{what} is in use by another dvk command{by}: wait for it to end or choose another "
                       "--out") from None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    else:  # pragma: no cover - a folder removed and remade five times over while we tried
        raise Busy(f"{what} keeps changing under this command: try again")
    try:
        _note(fd)
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
