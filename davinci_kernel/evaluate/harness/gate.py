"""Who may use a GPU at once: many checking, or one timing.

Covers: a readers-writer gate per device, held by the harness (never by a worker, so a
killed or hung worker cannot leave it locked). Correctness work of several processes on
one GPU (reference outputs, trials, re-checks, baseline preparation) runs side by side
under the shared side; timing and baseline measurement take the exclusive side, so
nothing else of ours runs on that GPU while a speedup is measured. The exclusive side
does not wait for checks to finish: it stops (SIGSTOP) every process registered on the
shared side, times, and resumes them, so a long correctness phase costs the timer nothing
and stopped processes add no host load while it times. Their work already queued on the
GPU drains during the timer's warm-up. A timer hands the GPU back as soon as its timed
calls end, staying on as a shared holder for its profile and outputs. A shared holder
without a process to stop is waited for. A waiting timer blocks new shared entries (writer preference), so timing is
never starved by a stream of checks.

Does not cover: other processes on the same GPU that this harness does not drive (run one
harness per GPU), or which worker runs what (``pool.py``).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Optional, Protocol


class Stoppable(Protocol):
    """A process tree the gate can stop and resume (``procs.WorkerProcess``); both nest."""

    def freeze(self) -> None: ...

    def thaw(self) -> None: ...


class DeviceGate:
    """Readers-writer lock for one device (threads of one harness process)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._holders: list[Stoppable] = []  # processes inside shared(), stopped while timing
        self._blocking = 0  # threads inside shared() with no process to stop
        self._exclusive = False  # a thread inside exclusive()
        self._waiting = 0  # threads waiting for exclusive()
        self._stopped: list[Stoppable] = []  # processes the timer inside exclusive() stopped
        self.stops = 0  # processes stopped for a timer so far (for tests and benchmarks)

    @contextlib.contextmanager
    def shared(self, holder: Optional[Stoppable] = None):
        """Check side by side. ``holder``: the process doing the work, which a timer may
        stop meanwhile (its messages then wait); without one the timer waits for this."""
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive and not self._waiting)
            if holder is None:
                self._blocking += 1
            else:
                self._holders.append(holder)
        try:
            yield
        finally:
            with self._cond:
                if holder is None:
                    self._blocking -= 1
                else:
                    self._holders.remove(holder)
                self._cond.notify_all()

    def enroll(self, holder: Stoppable) -> None:
        """A process that uses the GPU outside any request (a worker starting up) is stopped
        while a timer runs, like a shared holder, until ``leave``; one enrolled while a timer
        runs is stopped at once."""
        with self._cond:
            self._holders.append(holder)
            if self._exclusive:
                holder.freeze()
                self._stopped.append(holder)

    def leave(self, holder: Stoppable) -> None:
        with self._cond:
            if holder in self._holders:
                self._holders.remove(holder)
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self, then_share: Optional[Stoppable] = None):
        """Time alone: shared holders' processes are stopped until the block ends.
        ``then_share``: the timing process, which becomes a shared holder as the block ends,
        in the same step (a timer waiting next stops it at once), until ``leave``: what it
        does after its timed calls (its profile, its outputs) runs beside other checks."""
        with self._cond:
            self._waiting += 1
            try:
                self._cond.wait_for(lambda: not self._exclusive and self._blocking == 0)
            finally:
                self._waiting -= 1
            self._exclusive = True
            self._stopped = list(self._holders)
            for h in self._stopped:
                h.freeze()
            self.stops += len(self._stopped)
        try:
            yield
        finally:
            with self._cond:
                for h in self._stopped:
                    h.thaw()
                self._stopped = []
                if then_share is not None:
                    self._holders.append(then_share)
                self._exclusive = False
                self._cond.notify_all()

    def state(self) -> tuple[int, bool, int]:
        """(threads sharing, exclusive held, threads waiting for exclusive): for tests."""
        with self._cond:
            return len(self._holders) + self._blocking, self._exclusive, self._waiting


class Gates:
    """One gate per device name ("cuda:0", "cuda:1", "cpu"), made on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gates: dict[str, DeviceGate] = {}

    def __call__(self, device: str) -> DeviceGate:
        with self._lock:
            return self._gates.setdefault(device or "cpu", DeviceGate())
