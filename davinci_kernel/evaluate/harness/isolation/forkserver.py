"""Starting candidate workers by fork from a pre-imported parent (``candidate/zygote.py``),
seen from the harness.

Covers: starting the zygote (a fresh interpreter with the workers' clean environment, in a
folder of its own), asking it for a worker (the descriptors go over a ``SOCK_SEQPACKET``
socket with ``SCM_RIGHTS``), and ``ForkedProcess``, which gives the harness what
``subprocess.Popen`` gives for an exec'd worker: the launcher's pid (``setsid``, so its
process group is its pid), ``poll``/``wait``/``returncode`` read from the status pipe the
launcher writes the worker's wait status to (end of file without a status: the launcher
was killed, ``-SIGKILL``), and ``stdout``. A launcher is reaped by the zygote only once the
harness has its status, so its pid stays its own while the harness may signal it.

Used where the sandbox has every namespace and the harness runs as root (``usable``);
elsewhere, or if the zygote fails, workers are exec'd through ``unshare`` as before.
Does not cover: the worker's sandbox (``sandbox.py``, ``shared/sandbox_enter.py``) or which
worker runs what (``pool.py``).
"""

from __future__ import annotations

import array
import json
import logging
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Optional

from . import sandbox

log = logging.getLogger("davinci_kernel.evaluate")
ZYGOTE_MODULE = "davinci_kernel.evaluate.candidate.zygote"


class ForkServerError(RuntimeError):
    """The zygote could not start a worker; the caller execs one instead."""


def usable(caps: sandbox.Caps) -> bool:
    """The zygote makes the namespaces itself (as root), so it needs root and all of them."""
    return caps.namespaces and not caps.user_ns and caps.ns_args == sandbox.NAMESPACES and caps.uid_switch


class ForkedProcess:
    """A launcher forked by the zygote, with the ``subprocess.Popen`` surface the harness uses."""

    def __init__(self, server: ForkServer, pid: int, status_fd: int, stdout_fd: int, channel: socket.socket):
        self.server, self.pid = server, pid
        self.channel = channel  # the harness's end of the worker's channel
        self.returncode: Optional[int] = None
        self.stdout = os.fdopen(stdout_fd, "rb", buffering=0)
        self._status = status_fd
        self._buf = b""
        self._lock = threading.Lock()

    def poll(self) -> Optional[int]:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            while True:
                try:
                    chunk = os.read(self._status, 4 - len(self._buf))
                except BlockingIOError:
                    return None
                except OSError:
                    chunk = b""
                if chunk:
                    self._buf += chunk
                    if len(self._buf) < 4:
                        continue
                    self.returncode = os.waitstatus_to_exitcode(struct.unpack(">i", self._buf)[0])
                else:  # the launcher ended without a word: killed
                    self.returncode = -9
                break
            os.close(self._status)
            self.server.reap(self.pid)
            return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"worker launcher {self.pid}", timeout)
            with self._lock:
                fd = self._status if self.returncode is None else None
            if fd is not None:
                try:
                    select.select([fd], [], [], 0.1 if left is None else min(0.1, left))
                except (OSError, ValueError):
                    time.sleep(0.01)
        return self.returncode


class ForkServer:
    """One zygote: started on first use, asked for one worker at a time."""

    def __init__(self, device_env: dict, root: str, start_timeout: float = 120.0):
        self.device_env, self.root, self.start_timeout = dict(device_env), root, start_timeout
        self._lock = threading.Lock()
        self._proc: Optional[subprocess.Popen] = None
        self._sock: Optional[socket.socket] = None
        self._broken: Optional[str] = None
        self.started_s: Optional[float] = None  # how long the zygote took to preload
        self.fallback_noted = False  # the one line saying workers are exec'd instead was written

    def _start(self) -> None:
        home = os.path.join(self.root, "zygote")
        os.makedirs(home, mode=0o700, exist_ok=True)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        t0 = time.monotonic()
        self.log_path = os.path.join(home, "zygote.log")  # its own output and its launchers' early errors
        try:
            with open(self.log_path, "ab") as logf:
                self._proc = subprocess.Popen([sys.executable, "-m", ZYGOTE_MODULE, str(theirs.fileno())],
                                              pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=logf,
                                              stderr=subprocess.STDOUT, cwd=home, start_new_session=True,
                                              env=sandbox.worker_env(self.device_env, home))
        finally:
            theirs.close()
        self._sock = mine
        mine.settimeout(self.start_timeout)
        try:
            reply = json.loads(mine.recv(1 << 16) or b"{}")
        except (OSError, ValueError) as e:
            raise ForkServerError(f"the zygote did not start: {e}{self._log_tail()}") from None
        if reply.get("event") != "ready":
            raise ForkServerError(f"the zygote did not start{self._log_tail()}")
        self.started_s = time.monotonic() - t0

    def spawn(self, conf: dict, env: dict, cwd: str, procs_files: list[str],
              lock_fd: Optional[int]) -> ForkedProcess:
        """A launcher and its worker, PID 1 of fresh namespaces; returns the launcher."""
        out_r, out_w = os.pipe()
        st_r, st_w = os.pipe()
        mine, theirs = socket.socketpair()
        os.set_blocking(st_r, False)
        names, fds = ["channel", "output", "status"], [theirs.fileno(), out_w, st_w]
        if lock_fd is not None:
            names.append("lock")
            fds.append(lock_fd)
        req = {"cmd": "fork", "fds": names, "conf": conf, "env": env, "cwd": cwd, "procs_files": procs_files}
        try:
            with self._lock:
                if self._broken:
                    raise ForkServerError(self._broken)
                try:
                    if self._sock is None:
                        self._start()
                    self._sock.settimeout(30.0)
                    self._sock.sendmsg([json.dumps(req).encode()],
                                       [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
                    reply = json.loads(self._sock.recv(1 << 16) or b"{}")
                except (OSError, ValueError, ForkServerError) as e:
                    self._broken = f"zygote failed: {e}"
                    self._stop_locked()
                    raise ForkServerError(self._broken) from None
            if not isinstance(reply.get("pid"), int) or reply["pid"] <= 0:
                raise ForkServerError(f"the zygote could not fork: {str(reply.get('error'))[:200]}")
        except BaseException:
            for fd in (out_r, st_r):
                os.close(fd)
            mine.close()
            raise
        finally:
            for fd in (out_w, st_w):
                os.close(fd)
            theirs.close()
        return ForkedProcess(self, reply["pid"], st_r, out_r, mine)

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(max(0, os.path.getsize(self.log_path) - 400))
                tail = fh.read().decode(errors="replace").strip()
        except OSError:
            return ""
        return f" ({tail.splitlines()[-1][:300]})" if tail else ""

    def reap(self, pid: int) -> None:
        with self._lock:
            if self._sock is None:
                return
            try:
                self._sock.settimeout(5.0)
                self._sock.send(json.dumps({"cmd": "reap", "pids": [pid]}).encode())
            except OSError:
                pass

    def _stop_locked(self) -> None:
        if self._sock is not None:
            self._sock.close()  # the zygote ends at end of file
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def disable(self, why: str) -> None:
        """No more forks: later requests fail, so their workers are exec'd."""
        with self._lock:
            if not self._broken:
                self._broken = why
                log.warning("evaluator sandbox: candidate workers are started by exec: %s", why)
                self.fallback_noted = True
            self._stop_locked()

    def close(self) -> None:
        with self._lock:
            self._stop_locked()
