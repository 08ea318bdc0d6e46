"""Worker processes seen from the harness: start one, talk to it, stop it, kill it whole.

Covers: starting a reference process (trusted, the harness's uid) or a candidate worker
(inside the sandbox of ``sandbox.py``, a uid and scratch folder of its own, a cgroup where
one can be made) as a fresh interpreter with a socket for JSON messages; waiting for
messages with deadlines while watching that the process lives; stopping every process
of a worker's tree (SIGSTOP) while the harness reads its output files, and resuming it;
killing the whole tree (its PID namespace dies with it) and removing its scratch folder.
Does not cover: which worker runs what (``pool.py``) or the messages' meaning.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Optional

from . import sandbox
from .protocol import MAX_MESSAGE, MAX_REPORT, Channel, ProtocolError, WorkerDied, WorkerTimeout

_SPAWNED = itertools.count()

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


class Limits:
    """Resource limits of a candidate worker (from ``EvalConfig``)."""

    def __init__(self, memory_bytes: Optional[int] = None, cpu_seconds: int = 3600, nproc: int = 1024,
                 nofile: int = 4096):
        self.memory_bytes, self.cpu_seconds, self.nproc, self.nofile = memory_bytes, cpu_seconds, nproc, nofile


class WorkerProcess:
    """One worker process and its channel."""

    def __init__(self, kind: str, device: str, root: str, log_dir: str, sandboxed: bool,
                 limits: Optional[Limits] = None, seed: Optional[Callable[[str, Optional[int]], None]] = None):
        """``seed(triton_cache, uid)`` fills the new scratch folder's Triton cache before start."""
        self.kind, self.device = kind, device
        self.info: dict = {}
        self._freeze_lock = threading.Lock()
        self._frozen = 0  # nested freeze() calls not yet thawed
        self._ready = False
        caps = sandbox.probe() if sandboxed else sandbox.Caps()
        self.caps = caps
        self.uid = sandbox.next_uid() if sandboxed and caps.uid_switch else None
        self.scratch = sandbox.make_scratch(root, self.uid)
        self.triton_cache = os.path.join(self.scratch, "triton")  # TRITON_CACHE_DIR inside the worker
        if seed is not None:
            seed(self.triton_cache, self.uid)
        limits = limits or Limits()
        spec = None
        self.cgroup = None
        self.sandbox_desc = "none (trusted process)" if not sandboxed else caps.describe()
        if sandboxed:
            data = limits.memory_bytes if device == "cpu" and not (caps.cgroup or caps.cgroup_v1_memory) else None
            spec = sandbox.Spec(scratch=self.scratch, uid=self.uid, mounts=caps.namespaces and not caps.user_ns,
                                expose=sandbox.runtime_paths() if caps.uid_switch else [],
                                cpu_seconds=limits.cpu_seconds, nproc=limits.nproc, nofile=limits.nofile,
                                data_bytes=data)
            self.cgroup = sandbox.Cgroup(caps, f"dvk-{os.getpid()}-{next(_SPAWNED)}", limits.memory_bytes,
                                         limits.nproc)
        mine, theirs = socket.socketpair()
        conf = {"device": device, "env": {}, "spec": asdict(spec) if spec else None}
        module = f"davinci_kernel.evaluate.{kind}"
        argv = sandbox.launch_argv(caps, module, [str(theirs.fileno()), json.dumps(conf)])
        self.log_path = os.path.join(log_dir, f"{kind}-{device.replace(':', '')}-{next(_SPAWNED)}.log")
        log = open(self.log_path, "wb")
        cg = self.cgroup.path if self.cgroup is not None and self.cgroup.path else None
        procs_file = None if cg is None else os.path.join(cg, "cgroup.procs")

        def join_cgroup():  # in the child, before exec: every later descendant inherits it
            if procs_file:
                with open(procs_file, "w") as fh:
                    fh.write("0")

        try:
            self.proc = subprocess.Popen(argv, pass_fds=[theirs.fileno()], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.scratch, start_new_session=True,
                                         env=sandbox.worker_env(device_env(device), self.scratch),
                                         preexec_fn=join_cgroup if procs_file else None)
        finally:
            log.close()
            theirs.close()
        self.ch = Channel(mine, MAX_MESSAGE if kind == "reference" else MAX_REPORT)  # a candidate's: capped

    # ------------------------------------------------------------------ messages
    def alive(self) -> bool:
        return self.proc.poll() is None

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
            return "worker killed: out of host memory (the worker's memory limit, eval.worker_memory_gb)"
        tail = ""
        try:
            with open(self.log_path, errors="replace") as fh:
                lines = [ln for ln in fh.read().splitlines() if ln.strip()]
            tail = " | ".join(lines[-3:])
        except OSError:
            pass
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
        worker's timing; it runs again after the last ``thaw``. Only while the launcher
        is unreaped is its pid its own, so a reaped worker is left alone."""
        with self._freeze_lock:
            self._frozen += 1
            if self._frozen == 1 and self.proc.returncode is None:
                self._stop_tree()

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
            if self._frozen or self.proc.returncode is not None:
                return
            for pid in self.tree():
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass

    def kill(self) -> None:
        """Kill every process of the worker and return once they have all exited, so that
        their device memory is free again (a large CUDA context takes a while to tear down)."""
        if self.cgroup is not None:
            self.cgroup.kill()  # every process in it, those that left the tree too
        # Only while the launcher is unreaped (alive or a zombie) is its pid still ours: once
        # reaped, the pid and its process group may belong to an unrelated process.
        pids = self.tree() if self.proc.returncode is None else []
        if pids:
            for pid in reversed(pids):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        _wait_states(pids[1:], _EXITED, 30.0, 0.005)  # the launcher's descendants: reaped by others, watched here
        self.ch.close()
        if self.cgroup is not None:
            self.cgroup.remove()
        shutil.rmtree(self.scratch, ignore_errors=True)

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
