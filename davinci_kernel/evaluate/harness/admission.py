"""How much of a device's memory the evaluations in flight may take: admission by bytes.

Covers: one ledger per device, held by the harness. Before an evaluation touches the
device (its reference, baseline, check and timing) it asks for the bytes its task can
reach, ``memplan.bound(inputs, outputs)`` plus the flush buffer; it waits until they are
free, holds them until its last step, and its worker plans its timing inside them. A
task that needs more than the whole ledger waits until nothing else holds any and then
runs alone with all of it; a task of unknown size (the problem's code does not run on the
meta device) runs alone too. Waiters are served first come, first served, so a large task
is never starved by a stream of small ones. The ledger's capacity is the device's free
memory when the first reference process started, less a CUDA context for every other
process the pool may run on it: what the harness can promise without counting on memory
that another program on the GPU (a trainer's model, say) already has.

Does not cover: memory a candidate takes beyond its plan (the driver refuses it, and the
candidate fails alone), the sizes themselves (``memplan.py``, the reference process), or
who may run on the GPU at one time (``gate.py``).
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable
from typing import Optional

CONTEXT_BYTES = 1 << 30  # a CUDA context with torch, cuBLAS/cuDNN workspaces and Triton, per process
MARGIN_BYTES = 1 << 30  # kept free beside the promised bytes (allocator rounding, fragmentation)


class MemoryLedger:
    """Bytes of one device promised to evaluations in flight (threads of one harness)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, int(capacity))
        self._cond = threading.Condition()
        self._held = 0
        self._holders = 0
        self._queue: collections.deque[object] = collections.deque()  # waiting tickets, first come first
        self.alone = 0  # evaluations that ran alone so far (for tests and benchmarks)
        self.most_holders = 0  # the most evaluations that held bytes at once

    def grant_for(self, need: Optional[int]) -> int:
        """What a request of ``need`` bytes holds: all of it, or the whole ledger when it is
        more than that or unknown (None)."""
        return self.capacity if need is None or need >= self.capacity else max(0, int(need))

    @contextlib.contextmanager
    def hold(self, need: Optional[int]):
        """Wait for ``need`` bytes (None: unknown, run alone), hold them for the block; yields
        the bytes granted."""
        grant = self.grant_for(need)
        ticket = object()
        with self._cond:
            self._queue.append(ticket)
            try:
                self._cond.wait_for(lambda: self._queue[0] is ticket and self._fits(grant))
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()
            self._held += grant
            self._holders += 1
            self.most_holders = max(self.most_holders, self._holders)
            if grant >= self.capacity:
                self.alone += 1
        try:
            yield grant
        finally:
            with self._cond:
                self._held -= grant
                self._holders -= 1
                self._cond.notify_all()

    def _fits(self, grant: int) -> bool:
        return self._holders == 0 or self._held + grant <= self.capacity

    def state(self) -> tuple[int, int, int]:
        """(bytes held, evaluations holding, evaluations waiting): for tests."""
        with self._cond:
            return self._held, self._holders, len(self._queue)


class Ledgers:
    """One ledger per device name, made on first use from ``capacity(device)``."""

    def __init__(self, capacity: Callable[[str], int]) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._ledgers: dict[str, MemoryLedger] = {}

    def __call__(self, device: str) -> MemoryLedger:
        with self._lock:
            if device not in self._ledgers:
                self._ledgers[device] = MemoryLedger(self._capacity(device))
            return self._ledgers[device]


def capacity(free_bytes: int, processes: int) -> int:
    """What the harness may promise on a device with ``free_bytes`` free (seen by one of its
    processes after its own context was made) that will run ``processes`` processes."""
    return max(CONTEXT_BYTES, free_bytes - max(0, processes - 1) * CONTEXT_BYTES - MARGIN_BYTES)
