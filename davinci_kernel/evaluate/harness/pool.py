"""Which processes the evaluator has: reference processes, and candidate workers that each
serve one candidate and are then killed.

Covers: the evaluation slots (``["cuda:0", "cuda:0", "cuda:1"]``, or CPU slots), trusted
reference processes (as many per device as slots, each serving one request at a time: they
compute reference outputs and baselines, each once per task), and per device a queue of candidate workers
started ahead (``slots + spares``), so a new candidate finds a started interpreter and the
next one starts while it runs; their Triton caches start from what a reference process
built (``kernelcache.py``). A process starting up is enrolled on its device's gate
(``gate.py``), so it is stopped while a timer runs. A worker that ran a candidate is never reused. Also the
helpers that choose slots for a device. Does not cover: processes themselves (``procs.py``)
or judging (``evaluator.py``); the Ray pool is ``ray_pool.py``.
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import tempfile
import threading
from typing import Optional

from .gate import Gates
from .isolation import forkserver, sandbox
from .isolation.procs import Limits, WorkerProcess, device_env
from .kernelcache import KernelCache


class LocalPool:
    def __init__(self, slots: list[str], root: Optional[str] = None, log_dir: Optional[str] = None,
                 spares: int = 1, limits: Optional[Limits] = None, sandboxed: bool = True,
                 gates: Optional[Gates] = None, prefork: bool = True):
        self.slots = list(slots)
        self.gates = gates or Gates()  # a process starting up is stopped while a timer runs
        if sandboxed:
            sandbox.sweep_stale()  # what harness processes killed earlier left behind
        self._own_root = root is None
        self.root = root or tempfile.mkdtemp(prefix="dvk-pool-")
        sandbox.mark_owner(self.root)
        os.chmod(self.root, 0o711)  # workers reach their own scratch folder inside, nothing else
        self.kernels = KernelCache(os.path.join(self.root, "kernels"))  # Triton builds workers need
        self.log_dir = log_dir  # not used: a worker's output goes to a bounded buffer
        limits = limits or Limits()
        if limits.cpu_cores is None:  # the host's cores shared among the slots, one core at least
            limits.cpu_cores = max(1.0, float((os.cpu_count() or 1) // max(1, len(self.slots))))
        self.limits = limits
        self.sandboxed = sandboxed
        # candidate workers forked from a pre-imported parent, one per kind of device
        self.prefork = prefork and sandboxed and forkserver.usable(sandbox.probe())
        self._forkservers: dict[str, forkserver.ForkServer] = {}
        self.started = 0  # candidate workers started so far
        self.started_by: collections.Counter = collections.Counter()  # "fork" / "exec" -> how many
        self._lock = threading.RLock()
        self._closed = False
        self._slots: queue.Queue[str] = queue.Queue()
        for s in self.slots:
            self._slots.put(s)
        per_device = collections.Counter(self.slots)
        self._ahead = {dev: n + (n if spares < 0 else spares) for dev, n in per_device.items()}
        self._ready: dict[str, collections.deque] = {dev: collections.deque() for dev in per_device}
        # reference processes: as many per device as slots, each serving one request at a time
        self._refs: dict[str, queue.Queue[WorkerProcess]] = {dev: queue.Queue() for dev in per_device}
        try:
            for dev, n in per_device.items():
                for _ in range(n):
                    self._refs[dev].put(self._spawn_reference(dev))
                for _ in range(self._ahead[dev]):
                    self._ready[dev].append(self._spawn(dev))
        except BaseException:  # what was started is stopped again
            self.close()
            raise

    def _spawn(self, device: str) -> WorkerProcess:
        with self._lock:
            self.started += 1
        w = WorkerProcess("candidate", device, self.root, self.log_dir, sandboxed=self.sandboxed,
                          limits=self.limits, seed=self.kernels.seed if device != "cpu" else None,
                          forkserver=self._forkserver(device))
        with self._lock:
            self.started_by[w.started_by] += 1
        self.gates(device).enroll(w)
        return w

    def worker_start(self) -> tuple[str, Optional[str]]:
        """How this pool's candidate workers were started: ("forked", None) when every one
        came from a zygote, else ("exec", why: the zygote's failure, or that prefork is off)."""
        if self.started_by.get("exec", 0) == 0 and self.started_by.get("fork", 0) > 0:
            return "forked", None
        if not self.prefork:
            return "exec", "prefork off or unusable here (needs root and every namespace)"
        why = [fs._broken or "a worker was exec'd" for fs in self._forkservers.values()]
        return "exec", "; ".join(sorted(set(why))) or "no worker was started"

    def _forkserver(self, device: str) -> Optional[forkserver.ForkServer]:
        if not self.prefork:
            return None
        kind = "cpu" if device == "cpu" else "gpu"
        with self._lock:
            if kind not in self._forkservers:
                self._forkservers[kind] = forkserver.ForkServer(device_env(device), self.root)
            return self._forkservers[kind]

    def _spawn_reference(self, device: str) -> WorkerProcess:
        ref = WorkerProcess("reference", device, self.root, self.log_dir, sandboxed=False)
        self.gates(device).enroll(ref)
        return ref

    def _started(self, w: WorkerProcess) -> None:
        """Wait for a process's start-up; from now on its requests hold the gate."""
        try:
            w.wait_ready()
        finally:
            self.gates(w.device).leave(w)
        if w.kind == "reference" and w.device != "cpu":  # what it built at start-up seeds new workers
            self.kernels.set_seed(w.triton_cache)

    # ------------------------------------------------------------------ reference processes
    @contextlib.contextmanager
    def reference(self, device: str):
        """A free reference process of the device, for one request. One that died, timed out
        or hit a CUDA error (the request raised) is replaced."""
        ref = self._refs[device].get()
        try:
            if not ref.alive():
                self.gates(device).leave(ref)
                ref.kill()
                ref = self._spawn_reference(device)
            self._started(ref)
            yield ref
        except BaseException:
            self.gates(device).leave(ref)
            ref.kill()
            ref = self._spawn_reference(device)
            raise
        finally:
            self._refs[device].put(ref)

    # ------------------------------------------------------------------ candidate workers
    def acquire(self, timeout: float = 600.0) -> tuple[str, WorkerProcess]:
        """A slot and a started candidate worker on its device (the next one starts now)."""
        slot = self._slots.get(timeout=timeout)
        try:
            return slot, self.fresh(slot)
        except BaseException:
            self._slots.put(slot)
            raise

    def fresh(self, device: str) -> WorkerProcess:
        """A candidate worker that has never run anything; a replacement starts at once."""
        with self._lock:
            q = self._ready[device]
            w = q.popleft() if q else None
        if w is None:
            w = self._spawn(device)
        with self._lock:
            if not self._closed:
                self._ready[device].append(self._spawn(device))
        try:
            self._started(w)
        except KeyboardInterrupt:
            w.kill()
            raise
        except BaseException as e:
            w.kill()
            if w.started_by != "fork":
                raise
            # a forked worker that never became ready (its device would not start after the
            # fork, say): this pool's workers are exec'd from now on
            self._forkserver(device).disable(f"a forked worker did not start: {str(e)[:200]}")
            w = self._spawn(device)
            try:
                self._started(w)
            except BaseException:
                w.kill()
                raise
        return w

    def release(self, slot: str, w: Optional[WorkerProcess]) -> None:
        """Kill the worker and give the slot back, whatever the teardown meets."""
        try:
            if w is not None:
                w.kill()
        finally:
            self._slots.put(slot)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pending = [w for q in self._ready.values() for w in q]
            for q in self._ready.values():
                q.clear()
        for w in pending:
            self.gates(w.device).leave(w)
            w.kill()
        for fs in self._forkservers.values():
            fs.close()
        for q in self._refs.values():
            while not q.empty():
                ref = q.get_nowait()
                self.gates(ref.device).leave(ref)
                ref.stop()
        if self._own_root:
            sandbox.remove_tree(self.root)

    def processes(self, device: str) -> int:
        """The most processes this pool runs on ``device`` at once: reference processes,
        workers started ahead, and one worker per slot in use."""
        n = self.slots.count(device)
        return 2 * n + self._ahead.get(device, 0)

    def __len__(self) -> int:
        return len(self.slots)


def resolve_device(device: str) -> str:
    if device in ("auto", "", None):
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def check_workers(workers: Optional[int]) -> None:
    """A worker count a user gave: 1 to 256, or None for the default."""
    if workers is not None and not 1 <= workers <= 256:
        from ...errors import UsageError

        raise UsageError(f"--workers {workers}: give 1 to 256 workers (or leave it out for one per GPU, 2 on CPU)")


def default_slots(device: str, workers: Optional[int] = None, per_gpu: int = 1) -> list[str]:
    """``per_gpu`` slots per GPU (the harness's gate keeps timing exclusive), ``workers``
    spread over the GPUs when given, or ``workers`` CPU slots."""
    check_workers(workers)
    device = resolve_device(device)
    if device == "cpu":
        n = workers or max(1, min(2, os.cpu_count() or 1))
        return ["cpu"] * n
    if device == "cuda":
        import torch

        n_gpu = torch.cuda.device_count()
        if n_gpu == 0:
            from ...errors import UsageError

            raise UsageError("--device cuda was given but no CUDA GPU is visible; use --device cpu")
        gpus = [f"cuda:{i}" for i in range(n_gpu)]
        n = workers or n_gpu * max(1, per_gpu)
        if n > n_gpu:
            gpus = [gpus[i % n_gpu] for i in range(n)]
        return gpus
    return [device] * (workers or 1)
