"""The world a candidate worker starts in, built by one module for both start paths.

A worker is either forked from the zygote (``candidate/zygote.py``, started by
``harness/isolation/forkserver.py``) or exec'd through ``unshare`` (``harness/isolation/procs.py`` with
``harness/isolation/sandbox.py``). What a candidate can observe of its process must not depend on
which, nor on how the harness itself was started (under ``nohup`` its shell ignores
SIGHUP; a service manager may block signals): an ignored disposition and the blocked mask
survive both ``fork`` and ``exec``. So every worker, on either path, goes through here:

- ``begin`` (first thing in the worker, before the sandbox and before torch): every
  signal's disposition back to the default, then what a fresh interpreter sets (SIGINT
  raises ``KeyboardInterrupt``; SIGPIPE and SIGXFSZ ignored), no signal blocked; only the
  descriptors it is given (standard streams, its channel, its uid lock) stay open; on the
  forked path also its environment (``sandbox.worker_env``, which the exec'd path passes to
  ``exec``) and its folder.
- ``settle`` (last thing ``sandbox_enter.enter`` does, after the namespaces, the root, the
  limits and the uid): the working folder (the scratch) and the umask.

The namespaces, the root, the limits and the uid are ``sandbox_enter.enter``'s, which both
paths call from ``runtime.start``. Does not cover: the harness's side of either path.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from typing import Optional

UMASK = 0o077
# what CPython's own start-up sets (pylifecycle: SIGPIPE, SIGXFSZ ignored; SIGINT its handler)
FRESH_IGNORED = tuple(s for s in (getattr(signal, "SIGPIPE", None), getattr(signal, "SIGXFSZ", None)) if s)


def reset_signals() -> None:
    """Every catchable signal to its default disposition, then a fresh interpreter's few,
    and an empty blocked mask. Main thread only (``signal.signal``'s rule)."""
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # the C library's own real-time signals
            pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in FRESH_IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def open_fds() -> list[int]:
    try:
        return sorted(int(x) for x in os.listdir("/proc/self/fd"))
    except OSError:
        return list(range(3, 1024))


def keep_only(keep: Iterable[int]) -> None:
    """Close every descriptor but ``keep`` (the standard streams are always kept)."""
    kept = {0, 1, 2} | {int(fd) for fd in keep}
    for fd in open_fds():
        if fd not in kept:
            try:
                os.close(fd)
            except OSError:
                pass


def begin(keep: Iterable[int], env: Optional[dict] = None, cwd: Optional[str] = None) -> None:
    """A worker's start, on either path: signals reset, only ``keep`` open; ``env`` and
    ``cwd`` where the caller did not get them from ``exec`` (the forked path)."""
    reset_signals()
    keep_only(keep)
    if cwd is not None:
        os.chdir(cwd)
    if env is not None:
        os.environ.clear()
        os.environ.update(env)


def settle(home: str) -> None:
    """The worker's folder and umask, once its sandbox is built."""
    os.chdir(home)
    os.umask(UMASK)
