"""Worker processes: the local pool (embedded default) and the Ray pool (cluster).

Covers: spawning workers (``spawn`` start method, environment set before torch and
triton load: ``TRITON_INTERPRET=1`` on CPU, one GPU per worker on CUDA), handing them
out to evaluation threads, message passing with deadlines, killing a worker that hangs
or ran a flagged or crashed candidate and starting its replacement at once in the
background, so the next candidate does not wait for a cold start. The Ray pool runs one
``Evaluator`` actor per GPU (or CPU slot) anywhere in a Ray cluster. Does not cover:
what a job does (worker.py) or how results are judged (evaluator.py).
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import queue
import tempfile
import threading
import time
from typing import Optional

_SPAWNED = itertools.count()  # makes every worker's log file name unique


class WorkerTimeout(Exception):
    pass


class WorkerDied(Exception):
    pass


CPU_THREADS = 4  # torch CPU threads of each GPU worker and of the judging harness


def default_env(device: str) -> dict:
    """Environment of a worker process, set before torch loads.

    OMP_NUM_THREADS: a GPU worker's CPU work is small (input generation, index draws), and
    on a many-core host every worker and the harness would otherwise start a thread per
    core; with workers spinning in device synchronizes, torch's thread barriers then wait
    on preempted threads and a 1M-element comparison took 50 ms instead of 5.

    TORCHINDUCTOR_COMPILE_THREADS=1: the torch.compile baseline compiles in-process.
    Otherwise inductor keeps a compile pool whose helper threads (an idle-quiesce timer)
    and child processes can start while a later candidate runs, and the worker would flag
    that candidate for `threads` or `subprocess` it never started."""
    env = {"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
        env.setdefault("OMP_NUM_THREADS", "1")
    else:
        env["TRITON_INTERPRET"] = "0"
        env["OMP_NUM_THREADS"] = str(CPU_THREADS)
    return env


class WorkerHandle:
    """One worker process and its pipe."""

    _ctx = mp.get_context("spawn")

    def __init__(self, device: str, log_dir: str, slot: int):
        from . import worker

        self.device = device
        self.slot = slot
        self.jobs = 0
        self.info: dict = {}
        self.conn, child = self._ctx.Pipe(duplex=True)
        self.log_path = os.path.join(log_dir, f"worker-{slot}-{int(time.time() * 1e3)}-{next(_SPAWNED)}.log")
        self.proc = self._ctx.Process(target=worker.main, args=(child, device, default_env(device), self.log_path),
                                      daemon=True)
        self.proc.start()
        child.close()
        self._ready = False

    def wait_ready(self, timeout: float = 300.0) -> None:
        if self._ready:
            return
        msg = self.recv(timeout)
        if msg.get("event") != "ready":
            raise WorkerDied(f"unexpected first message {msg!r}")
        self.info = msg
        self._ready = True

    def send(self, msg: dict) -> None:
        try:
            self.conn.send(msg)
        except (BrokenPipeError, OSError) as e:
            raise WorkerDied(f"worker pipe closed: {e}") from None

    def recv(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeout(f"no answer within {timeout:.0f} s")
            try:
                if self.conn.poll(min(left, 0.5)):
                    return self.conn.recv()
            except (EOFError, OSError):
                raise WorkerDied(self._death_note()) from None
            if not self.proc.is_alive():
                # Drain what it managed to send before dying.
                try:
                    if self.conn.poll(0):
                        return self.conn.recv()
                except (EOFError, OSError):
                    pass
                raise WorkerDied(self._death_note())

    def _death_note(self) -> str:
        self.proc.join(timeout=1)
        code = self.proc.exitcode
        tail = ""
        try:
            with open(self.log_path, errors="replace") as fh:
                lines = [ln for ln in fh.read().splitlines() if ln.strip()]
            tail = " | ".join(lines[-3:])
        except OSError:
            pass
        sig = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return f"worker process died ({sig}){': ' + tail[-400:] if tail else ''}"

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.join(timeout=5)
        except Exception:  # noqa: BLE001 - already gone
            pass
        try:
            self.conn.close()
        except OSError:
            pass

    def stop(self) -> None:
        try:
            self.conn.send({"cmd": "stop"})
            self.proc.join(timeout=5)
        except (OSError, BrokenPipeError):
            pass
        if self.proc.is_alive():
            self.kill()


class LocalPool:
    """Workers for a list of device slots (e.g. ["cuda:0", "cuda:1"] or ["cpu", "cpu"])."""

    def __init__(self, slots: list[str], log_dir: Optional[str] = None, max_jobs_per_worker: int = 200,
                 spares: int = 0):
        """``spares``: workers kept started and idle per device, so that replacing a worker
        (after a flagged or crashed candidate, or for a fresh-process re-verification)
        does not wait for a new process to import torch and set up the device."""
        self.slots = list(slots)
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="dvk-workers-")
        self.max_jobs = max_jobs_per_worker
        self._free: "queue.Queue[WorkerHandle]" = queue.Queue()
        self._lock = threading.Lock()
        self._all: list[WorkerHandle] = []
        self.replaced = 0
        self._closed = False
        for i, dev in enumerate(self.slots):
            self._free.put(self._spawn(dev, i))
        self._spares: dict[str, "queue.Queue[WorkerHandle]"] = {dev: queue.Queue() for dev in dict.fromkeys(slots)}
        for dev, q in self._spares.items():
            for _ in range(spares):
                q.put(self._spawn(dev, len(self._all)))

    def _spawn(self, device: str, slot: int) -> WorkerHandle:
        h = WorkerHandle(device, self.log_dir, slot)
        with self._lock:
            self._all.append(h)
        return h

    def acquire(self, timeout: float = 600.0) -> WorkerHandle:
        h = self._free.get(timeout=timeout)
        h.wait_ready()
        return h

    def release(self, h: WorkerHandle, recycle: bool = False) -> None:
        h.jobs += 1
        if self._closed:
            h.stop()
            return
        if recycle or h.jobs >= self.max_jobs or not h.proc.is_alive():
            self._retire(h)
            self._free.put(self._replacement(h))  # a spare, or one that starts now and gets ready meanwhile
        else:
            self._free.put(h)

    def fresh(self, h: WorkerHandle) -> WorkerHandle:
        """Swap an acquired worker for one that has never run a job, for the caller to use."""
        self._retire(h)
        new = self._replacement(h)
        new.wait_ready()
        return new

    def _retire(self, h: WorkerHandle) -> None:
        h.kill()
        with self._lock:
            if h in self._all:
                self._all.remove(h)
            self.replaced += 1

    def _replacement(self, h: WorkerHandle) -> WorkerHandle:
        q = self._spares.get(h.device)
        try:
            spare = q.get_nowait() if q is not None else None
        except queue.Empty:
            spare = None
        if spare is None:
            return self._spawn(h.device, h.slot)
        spare.slot = h.slot
        q.put(self._spawn(h.device, len(self._all)))  # the next spare starts now
        return spare

    def close(self) -> None:
        self._closed = True
        with self._lock:
            handles = list(self._all)
        for h in handles:
            h.stop()

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
        from ..errors import UsageError

        raise UsageError(f"--workers {workers}: give 1 to 256 workers (or leave it out for one per GPU, 2 on CPU)")


def default_slots(device: str, workers: Optional[int] = None, per_gpu: int = 1) -> list[str]:
    """``per_gpu`` workers per GPU (the harness's gate keeps timing exclusive), ``workers``
    spread over the GPUs when given, or ``workers`` CPU workers."""
    check_workers(workers)
    device = resolve_device(device)
    if device == "cpu":
        n = workers or max(1, min(2, os.cpu_count() or 1))
        return ["cpu"] * n
    if device == "cuda":
        import torch

        n_gpu = torch.cuda.device_count()
        if n_gpu == 0:
            from ..errors import UsageError

            raise UsageError("--device cuda was given but no CUDA GPU is visible; use --device cpu")
        gpus = [f"cuda:{i}" for i in range(n_gpu)]
        n = workers or n_gpu * max(1, per_gpu)
        if n > n_gpu:
            gpus = [gpus[i % n_gpu] for i in range(n)]
        return gpus
    return [device] * (workers or 1)
