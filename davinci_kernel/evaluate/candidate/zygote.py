"""The parent of candidate workers: an interpreter with torch, Triton and the worker's code
already imported (CUDA not initialised) that forks one process per worker, so no candidate
waits for a cold interpreter.

It never runs a candidate and never learns a judged input: the harness starts it with a
worker's clean environment (``sandbox.worker_env``, nothing of the harness's secrets), it
imports only library and harness code, and it answers one kind of request over its control
socket: "fork a worker" with the descriptors that worker gets (its channel, the write end
of its output pipe, the write end of its status pipe, its uid lock) and the worker's
configuration. Per request it forks a **launcher** (what ``unshare --fork --kill-child`` is
for an exec'd worker): the launcher starts a session, joins the worker's cgroup, points
stdout and stderr at the output pipe, makes fresh mount, IPC, UTS, cgroup, network and PID
namespaces, and forks the **worker**, PID 1 of the new PID namespace, killed with its
launcher. The worker mounts a fresh ``/proc``, keeps only its channel, the output pipe and
its uid lock, resets every signal's disposition and its blocked mask, takes its environment
and folder (all of it ``shared/worker_world.begin``, which an exec'd worker runs too), and then runs
``worker.main``, which enters the sandbox (``sandbox_enter.enter``: root, uid, user
namespace, limits) before any candidate code, exactly as an exec'd worker does. The
launcher waits for the worker and writes its wait status to the status pipe; the zygote
reaps a launcher only when the harness says so, so a launcher's pid is never reused while
the harness may still signal it.

Does not cover: the harness's side (``harness/isolation/forkserver.py``), the sandbox itself
(``shared/sandbox_enter.py``), the worker's job (``worker.py``). Run as
``python -m davinci_kernel.evaluate.candidate.zygote FD``.
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import struct
import sys
import traceback

from ..shared.sandbox_enter import MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_REC, Libc

# what an exec'd worker would have to import before its first candidate
PRELOAD = ("torch", "triton", "triton.language", "davinci_kernel.evaluate.candidate.worker",
           "davinci_kernel.evaluate.shared.profile", "davinci_kernel.evaluate.shared.timing",
           "davinci_kernel.evaluate.shared.audit", "davinci_kernel.evaluate.shared.occupy",
           "davinci_kernel.evaluate.shared.transfer", "davinci_kernel.evaluate.shared.sandbox_enter")

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS = 0x00020000, 0x02000000, 0x04000000
CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x08000000, 0x20000000, 0x40000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
MAX_REQUEST = 1 << 16
FD_NAMES = ("channel", "output", "status", "lock")  # the uid lock only where the worker has one


def recv_request(sock: socket.socket) -> tuple[dict | None, list[int]]:
    """One request and the descriptors sent with it; (None, []) when the harness is gone."""
    fds = array.array("i")
    msg, anc, _flags, _addr = sock.recvmsg(MAX_REQUEST, socket.CMSG_SPACE(len(FD_NAMES) * fds.itemsize))
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if not msg:
        return None, list(fds)
    return json.loads(msg.decode()), list(fds)


def _launcher(req: dict, fds: dict, control: int) -> None:
    """In the forked launcher: never returns."""
    code = 1
    try:
        lc = Libc()
        os.close(control)
        os.setsid()
        for f in req.get("procs_files") or []:  # before the cgroup namespace: it is rooted here
            with open(f, "w") as fh:
                fh.write("0")
        lc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds["output"], 1)
        os.dup2(fds["output"], 2)
        os.close(null)
        lc.check(lc.c.unshare(NAMESPACES), "unshare")
        lc.mount(None, "/", None, MS_REC | MS_PRIVATE)
        pid = os.fork()
        if pid == 0:
            _worker(req, fds)  # never returns
        for name in ("channel", "output"):
            os.close(fds[name])
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        os.write(fds["status"], struct.pack(">i", status))
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code
    except BaseException:  # noqa: BLE001 - the launcher reports and ends
        traceback.print_exc()
    os._exit(code & 0xFF)


def _worker(req: dict, fds: dict) -> None:
    """In the worker, PID 1 of its namespace: never returns."""
    code = 1
    try:
        lc = Libc()
        lc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # dies with its launcher
        lc.mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        from ..shared import worker_world  # signals, descriptors, environment, folder: as an exec'd worker's

        worker_world.begin({fds["channel"]} | ({fds["lock"]} if "lock" in fds else set()), req["env"], req["cwd"])
        conf = req["conf"]
        if conf.get("spec") is not None:
            conf["spec"]["lock_fd"] = fds.get("lock")
        from . import worker

        args = [str(fds["channel"]), json.dumps(conf)]
        sys.argv = [worker.__file__, *args]  # as ``python -m ...worker FD CONF`` has it
        worker.main(args)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - the worker's failure is its exit code and its output
        traceback.print_exc()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _reap(pids: set[int]) -> None:
    for pid in list(pids):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            pids.discard(pid)


def serve(control: socket.socket) -> None:
    released: set[int] = set()  # launchers the harness is done with, reaped once they exited
    while True:
        _reap(released)
        control.settimeout(1.0 if released else None)
        try:
            req, got = recv_request(control)
        except TimeoutError:
            continue
        except (OSError, ValueError):
            return
        if req is None:
            return
        cmd = req.get("cmd")
        if cmd == "reap":
            released.update(int(p) for p in req.get("pids", []))
            continue
        names = req.get("fds") or []
        if cmd != "fork" or len(got) != len(names) or not {"channel", "output", "status"} <= set(names) \
                or not set(names) <= set(FD_NAMES):
            for fd in got:
                os.close(fd)
            control.sendall(json.dumps({"error": f"bad request {str(cmd)[:40]}"}).encode())
            continue
        fds = dict(zip(names, got))
        try:
            pid = os.fork()
        except OSError as e:
            pid, err = -1, str(e)
        if pid == 0:
            _launcher(req, fds, control.fileno())
        for fd in got:
            os.close(fd)
        control.sendall(json.dumps({"pid": pid} if pid > 0 else {"error": err}).encode())


CUDA_ERROR_NOT_INITIALIZED = 3


def _cuda_touched() -> bool:
    """Whether anything imported started CUDA, decided by the driver's state: torch says it
    initialised CUDA, or the driver library is loaded and answers a query that needs
    ``cuInit`` (``cuCtxGetCurrent``) with anything but "not initialised". A CUDA build of torch
    maps ``libcuda.so`` at import without initialising it; a child forked from such a process
    initialises CUDA itself. A child forked after ``cuInit`` (even with no context) cannot."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return True
    return driver_initialised()


def driver_initialised() -> bool:
    """``cuInit`` has run in this process. The library is looked up only if already loaded
    (``RTLD_NOLOAD``), so asking loads nothing and initialises nothing."""
    import ctypes

    lib = None
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            break
        except OSError:
            continue
    if lib is None:
        return False  # never loaded: certainly not initialised
    try:
        ctx = ctypes.c_void_p()
        rc = lib.cuCtxGetCurrent(ctypes.byref(ctx))
    except (AttributeError, OSError):
        return True  # a driver we cannot ask: assume the worst (workers are exec'd)
    return rc != CUDA_ERROR_NOT_INITIALIZED


def main(argv: list[str]) -> None:
    """Preload, say ready, serve until the harness closes the control socket (or dies)."""
    control = socket.socket(fileno=int(argv[0]))
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if _cuda_touched():  # a child forked after CUDA started could not use the GPU
        print("the zygote started CUDA while importing; workers are exec'd instead", flush=True)
        return
    control.sendall(json.dumps({"event": "ready", "pid": os.getpid()}).encode())
    serve(control)


if __name__ == "__main__":
    main(sys.argv[1:])
