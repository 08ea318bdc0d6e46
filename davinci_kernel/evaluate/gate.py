"""Who may use a GPU at once: many checking, or one timing.

Covers: a readers-writer gate per device, held by the harness (never by a worker, so a
killed or hung worker cannot leave it locked). Correctness work of several workers on one
GPU (reference outputs, trials, re-checks, sampling) runs side by side under the shared
side; timing and baseline measurement take the exclusive side, so nothing else runs on that
GPU while a speedup is measured. A waiting timer blocks new shared entries (writer
preference), so timing is never starved by a stream of checks.

Does not cover: other processes on the same GPU that this harness does not drive (run one
harness per GPU), or which worker runs what (``pool.py``).
"""

from __future__ import annotations

import contextlib
import threading


class DeviceGate:
    """Readers-writer lock for one device (threads of one harness process)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sharing = 0  # threads inside shared()
        self._exclusive = False  # a thread inside exclusive()
        self._waiting = 0  # threads waiting for exclusive()

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive and not self._waiting)
            self._sharing += 1
        try:
            yield
        finally:
            with self._cond:
                self._sharing -= 1
                if self._sharing == 0:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self):
        with self._cond:
            self._waiting += 1
            try:
                self._cond.wait_for(lambda: not self._exclusive and self._sharing == 0)
            finally:
                self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()

    def state(self) -> tuple[int, bool, int]:
        """(threads sharing, exclusive held, threads waiting for exclusive): for tests."""
        with self._cond:
            return self._sharing, self._exclusive, self._waiting


class Gates:
    """One gate per device name ("cuda:0", "cuda:1", "cpu"), made on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gates: dict[str, DeviceGate] = {}

    def __call__(self, device: str) -> DeviceGate:
        with self._lock:
            return self._gates.setdefault(device or "cpu", DeviceGate())
