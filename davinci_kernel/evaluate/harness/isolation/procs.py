"""Worker processes seen from the harness: start one, talk to it, stop it, kill it whole.

Covers: starting a reference process (trusted, the harness's uid) or a candidate worker
(inside the sandbox of ``sandbox.py``: a uid leased for its life, a scratch tmpfs, a cgroup
with memory, process and CPU limits where one can be made) as a fresh interpreter with a
socket for JSON messages; its stdout and stderr drained into a bounded buffer
(``OutputTail``, the last 64 KiB); waiting for messages with deadlines while watching that
the process lives; stopping every process of a worker (``cgroup.freeze``, else SIGSTOP to its
tree) while the harness reads its output files, and resuming it; teardown that cannot fail:
kill the cgroup and the tree (its PID namespace dies with it), unmount and remove the
scratch, give the uid back. Does not cover: which worker runs what (``pool.py``) or the
messages' meaning.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Optional

from ...shared.protocol import MAX_MESSAGE, MAX_REPORT, Channel, ProtocolError, WorkerDied, WorkerTimeout
from . import sandbox, sandbox_cgroup
from .forkserver import ForkServer, ForkServerError

_SPAWNED = itertools.count()
log = logging.getLogger("davinci_kernel.evaluate")

CPU_THREADS = 4  # torch CPU threads of each GPU worker and of the judging harness


def device_env(device: str) -> dict:
    """Environment of a worker that depends on its device, set before torch loads.

    OMP_NUM_THREADS: a GPU worker's CPU work is small, and on a many-core host every worker
    and the harness would otherwise start a thread per core (a 1M-element comparison then
    took 50 ms instead of 5). TORCHINDUCTOR_COMPILE_THREADS=1: the torch.compile baseline
    compiles in-process, with no pool of helper threads and processes."""
    env = {"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    if device == "cpu":
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    else:
        env.update(TRITON_INTERPRET="0", OMP_NUM_THREADS=str(CPU_THREADS))
    return env


HOST_OOM_NOTE = "worker killed: out of host memory"  # a worker whose cgroup recorded an OOM kill

class Limits:
    """Resource limits of a candidate worker (from ``EvalConfig``). ``cpu_cores``: its CPU
    quota (None: the pool's share, cores / slots); ``scratch_bytes``: the size of its scratch
    tmpfs and its RLIMIT_FSIZE (None: its memory limit, or 8 GiB)."""

    def __init__(self, memory_bytes: Optional[int] = None, cpu_seconds: int = 3600, nproc: int = 1024,
                 nofile: int = 4096, cpu_cores: Optional[float] = None, scratch_bytes: Optional[int] = None):
        self.memory_bytes, self.cpu_seconds, self.nproc, self.nofile = memory_bytes, cpu_seconds, nproc, nofile
        self.cpu_cores = cpu_cores
        self.scratch_bytes = scratch_bytes or memory_bytes or 8 << 30


class OutputTail:
    """A process's stdout and stderr: a pipe drained by a thread, of which only the last
    ``LIMIT`` bytes are kept (whatever the process writes, the harness holds no more)."""

    LIMIT = 64 << 10

    def __init__(self, pipe):
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self.total = 0  # bytes written, kept or not
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, args=(pipe,), name="dvk-worker-output", daemon=True)
        self._thread.start()

    def _drain(self, pipe) -> None:
        fd = pipe.fileno()
        try:
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return
                with self._lock:
                    self._chunks.append(chunk)
                    self._size += len(chunk)
                    self.total += len(chunk)
                    while self._size - len(self._chunks[0]) >= self.LIMIT:
                        self._size -= len(self._chunks.popleft())
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                pipe.close()

    def text(self) -> str:
        with self._lock:
            data = b"".join(self._chunks)[-self.LIMIT:]
        return data.decode(errors="replace")

    def close(self, timeout: float = 5.0) -> None:
        self._thread.join(timeout)


# the module each kind of process runs (``python -m``): its path says which process it is
WORKER_MODULES = {"candidate": "davinci_kernel.evaluate.candidate.worker",
                  "reference": "davinci_kernel.evaluate.reference.process"}


class WorkerProcess:
    """One worker process and its channel."""

    def __init__(self, kind: str, device: str, root: str, log_dir: Optional[str] = None, sandboxed: bool = True,
                 limits: Optional[Limits] = None, seed: Optional[Callable[[str, Optional[int]], None]] = None,
                 forkserver: Optional[ForkServer] = None):
        """``seed(triton_cache, uid)`` fills the new scratch folder's Triton cache before start.
        ``log_dir`` is not used (output goes to a bounded buffer, ``output``). ``forkserver``:
        a sandboxed worker is forked from its pre-imported zygote (else, or if that fails,
        exec'd through ``unshare``)."""
        self.kind, self.device = kind, device
        self.info: dict = {}
        self._freeze_lock = threading.Lock()
        self._frozen = 0  # nested freeze() calls not yet thawed
        self._frozen_by_cgroup = False
        self._stopped_by_signal = False
        self._ready = False
        self._gone = False
        self.lease: Optional[sandbox.UidLease] = None
        self.scratch_dir: Optional[sandbox.Scratch] = None
        self.cgroup: Optional[sandbox_cgroup.Cgroup] = None
        self.output: Optional[OutputTail] = None
        self.proc = None
        self.ch = None
        self.started_by = "exec"  # or "fork": from the zygote (forkserver.py)
        try:
            self._start(kind, device, root, sandboxed, limits or Limits(), seed, forkserver)
        except BaseException:
            self.kill()
            raise

    def _start(self, kind, device, root, sandboxed, limits, seed, forkserver) -> None:
        caps = sandbox.probe() if sandboxed else sandbox.Caps()
        self.caps = caps
        self.lease = sandbox.UidLease.take() if sandboxed and caps.uid_switch else None
        self.uid = self.lease.uid if self.lease else None
        self.scratch_dir = sandbox.Scratch(root, self.uid, limits.scratch_bytes, tmpfs=sandboxed and caps.scratch_tmpfs)
        self.scratch = self.scratch_dir.path
        self.triton_cache = os.path.join(self.scratch, "triton")  # TRITON_CACHE_DIR inside the worker
        if seed is not None:
            seed(self.triton_cache, self.uid)
        spec, inner = None, self.scratch
        self.sandbox_desc = "none (trusted process)" if not sandboxed else caps.describe()
        if sandboxed:
            data = limits.memory_bytes if device == "cpu" and not caps.cgroup_parents() else None
            mounts = caps.namespaces and not caps.user_ns
            spec = sandbox.Spec(scratch=self.scratch, uid=self.uid, mounts=mounts, userns=caps.worker_userns,
                                expose=sandbox.runtime_paths() if caps.uid_switch else [],
                                devices=sandbox.gpu_devices() if device != "cpu" else [],
                                lock_fd=self.lease.fd if self.lease else None, cpu_seconds=limits.cpu_seconds,
                                nproc=limits.nproc, nofile=limits.nofile, fsize_bytes=limits.scratch_bytes,
                                data_bytes=data)
            inner = sandbox.INNER if mounts else self.scratch
            if caps.cgroup_parents():
                self.cgroup = sandbox_cgroup.Cgroup(caps.cgroup, caps.cgroup_v1, f"dvk-{os.getpid()}-{next(_SPAWNED)}",
                                                    limits.memory_bytes, limits.nproc, limits.cpu_cores)
        mine, theirs = socket.socketpair()
        conf = {"device": device, "env": {}, "spec": asdict(spec) if spec else None}
        argv = sandbox.launch_argv(caps, WORKER_MODULES[kind], [str(theirs.fileno()), json.dumps(conf)])
        procs_files = self.cgroup.procs_files() if self.cgroup is not None else []

        def join_cgroup():  # in the child, before exec: every later descendant inherits it
            for f in procs_files:
                with open(f, "w") as fh:
                    fh.write("0")

        lock_fd = self.lease.fd if self.lease and self.lease.fd is not None else None
        if forkserver is not None and sandboxed:
            try:
                self.proc = forkserver.spawn(conf, sandbox.worker_env(device_env(device), inner), self.scratch,
                                             procs_files, lock_fd)
            except ForkServerError as e:
                if not forkserver.fallback_noted:  # said once per zygote
                    forkserver.fallback_noted = True
                    log.warning("evaluator sandbox: candidate workers are started by exec: %s", e)
            else:
                theirs.close()
                mine.close()
                self.output = OutputTail(self.proc.stdout)
                self.ch = Channel(self.proc.channel, MAX_REPORT)
                self.started_by = "fork"
                return
        fds = [theirs.fileno()] + ([lock_fd] if lock_fd is not None else [])
        try:
            self.proc = subprocess.Popen(argv, pass_fds=fds, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.scratch, start_new_session=True,
                                         env=sandbox.worker_env(device_env(device), inner),
                                         preexec_fn=join_cgroup if procs_files else None)
            self.output = OutputTail(self.proc.stdout)
        finally:
            theirs.close()
        self.ch = Channel(mine, MAX_MESSAGE if kind == "reference" else MAX_REPORT)  # a candidate's: capped

    # ------------------------------------------------------------------ messages
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 300.0) -> None:
        if self._ready:
            return
        msg = self.recv(timeout)
        if msg.get("event") != "ready":
            raise WorkerDied(f"unexpected first message {str(msg)[:200]}")
        self.info = msg
        for note in msg.get("notes") or []:
            self.sandbox_desc += f"; {note}"
        self._ready = True

    def send(self, msg: dict) -> None:
        self.ch.send(msg)

    def recv(self, timeout: float) -> dict:
        try:
            return self.ch.recv(timeout, alive=self.alive)
        except WorkerTimeout:
            raise WorkerTimeout(f"no answer within {timeout:.0f} s") from None
        except ProtocolError:
            raise  # the worker's own doing: a verdict, not a death
        except WorkerDied as e:
            raise WorkerDied(self._death_note(str(e))) from None

    def _death_note(self, why: str) -> str:
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return f"worker stopped answering ({why})"
        code = self.proc.returncode
        if self.cgroup is not None and self.cgroup.oom_killed():
            return f"{HOST_OOM_NOTE} (the worker's memory limit, eval.worker_memory_gb)"
        lines = [ln for ln in (self.output.text() if self.output else "").splitlines()[-50:] if ln.strip()]
        tail = " | ".join(ln[-300:] for ln in lines[-3:])
        sig = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        if code is not None and code > 128 and self.caps.namespaces:  # unshare reports the child's signal this way
            sig = f"signal {code - 128}"
        return f"worker process died ({sig}){': ' + tail[-400:] if tail else ''}"

    # ------------------------------------------------------------------ the process tree
    def tree(self) -> list[int]:
        """The worker's processes: the launcher and every descendant."""
        seen, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.append(pid)
            try:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/children") as fh:
                        todo += [int(x) for x in fh.read().split()]
            except OSError:
                continue
        return seen

    def freeze(self) -> None:
        """Stop every process of the worker (and wait until they are stopped). Nests: the
        harness stops a worker to read its output and the gate stops it for another
        worker's timing; it runs again after the last ``thaw``. Through ``cgroup.freeze``
        where the worker has a v2 cgroup (nothing in it runs, children forked meanwhile
        included), else SIGSTOP to its process tree. Only while the launcher is unreaped is
        its pid its own, so a reaped worker is left alone."""
        with self._freeze_lock:
            self._frozen += 1
            if self._frozen == 1 and self.proc is not None and self.proc.returncode is None:
                self._frozen_by_cgroup = self.cgroup is not None and self.cgroup.freeze(True)
                # a process the freezer has not reached in time is stopped by signal as well
                self._stopped_by_signal = not (self._frozen_by_cgroup and self.cgroup.is_frozen())
                if self._stopped_by_signal:
                    self._stop_tree()

    def is_stopped(self) -> bool:
        """Nothing of the worker runs: its cgroup is frozen, or every process of it is stopped."""
        if self.cgroup is not None and self.cgroup.is_frozen():
            return True
        return all(_state(pid) in _STOPPED | _EXITED for pid in self.tree())

    def _stop_tree(self) -> None:
        for _ in range(3):  # a process forked meanwhile is caught by the next pass
            pids = self.tree()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except OSError:
                    pass
            _wait_states(pids, _STOPPED | _EXITED, 1.0, 0.0005)
            if set(self.tree()) <= set(pids):
                return

    def thaw(self) -> None:
        with self._freeze_lock:
            self._frozen = max(0, self._frozen - 1)
            if self._frozen or self.proc is None or self.proc.returncode is not None:
                return
            if self._frozen_by_cgroup and self.cgroup is not None and self.cgroup.freeze(False) \
                    and not self._stopped_by_signal:
                return
            for pid in self.tree():
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass

    def kill(self) -> None:
        """Kill every process of the worker and return once they have all exited (so that
        their device memory is free again: a large CUDA context takes a while to tear down),
        then remove its cgroup, unmount and remove its scratch and give its uid back.
        Never raises; each step runs whatever the one before did."""
        if self._gone:
            return
        self._gone = True
        for step in (self._kill_processes, self._close_channel, self._remove_cgroup, self._remove_scratch,
                     self._release_uid):
            try:
                step()
            except Exception as e:  # noqa: BLE001 - teardown goes on
                log.warning("worker teardown: %s failed: %s", step.__name__, e)

    def _kill_processes(self) -> None:
        if self.cgroup is not None:
            self.cgroup.kill()  # every process in it, those that left the tree too
        if self.proc is None:
            return
        # Only while the launcher is unreaped (alive or a zombie) is its pid still ours: once
        # reaped, the pid and its process group may belong to an unrelated process.
        pids = self.tree() if self.proc.returncode is None else []
        if pids:
            for pid in reversed(pids):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        _wait_states(pids[1:], _EXITED, 30.0, 0.005)  # the launcher's descendants: reaped by others, watched here

    def _close_channel(self) -> None:
        if self.ch is not None:
            self.ch.close()
        if self.output is not None:
            self.output.close()

    def _remove_cgroup(self) -> None:
        if self.cgroup is not None:
            self.cgroup.remove()

    def _remove_scratch(self) -> None:
        if self.scratch_dir is not None:
            self.scratch_dir.remove()

    def _release_uid(self) -> None:
        if self.lease is not None:
            self.lease.release()

    def stop(self) -> None:
        """End politely (reference processes), else kill."""
        try:
            self.ch.send({"cmd": "stop"})
            self.proc.wait(timeout=5)
        except (WorkerDied, subprocess.TimeoutExpired, OSError):
            pass
        self.kill()


_STOPPED = frozenset({"T", "t"})
_EXITED = frozenset({"Z", "X", None})  # a zombie has released its memory; None: gone


def _wait_states(pids: list[int], states: frozenset, timeout: float, step: float) -> None:
    """Until every one of ``pids`` is in one of ``states`` (``_state``), or ``timeout``.
    Only waits: a pid reused meanwhile costs at most the timeout."""
    deadline = time.monotonic() + timeout
    for pid in pids:
        while _state(pid) not in states and time.monotonic() < deadline:
            time.sleep(step)


def _state(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
