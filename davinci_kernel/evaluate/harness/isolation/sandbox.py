"""The OS sandbox a candidate worker runs in, seen from the harness: probe, launch, tear down.

Covers, in the harness process: probing once which mechanisms this machine allows (a trial
worker enters the real sandbox; one line says what is missing, and every result's
``sandbox`` records it), the command line that starts a worker inside fresh namespaces
(``unshare``: mount, PID, network, IPC, UTS and cgroup namespaces, its own ``/proc``, the
worker killed when its launcher dies; the user namespace is made by the worker itself,
``sandbox_enter.py``), a uid per worker that no other live worker of any harness process on
the machine holds (a lock file per uid, ``flock``-ed for the worker's life, its launcher
holding a copy), the worker's scratch (a size-limited tmpfs mounted by the harness, so the
harness reads output files at their host path, and unmounting it at teardown frees
everything the worker wrote, however deep), its clean environment, teardown steps that
never raise, removing what a killed harness process left behind (folders ``dvk-*`` whose
``.owner`` names a dead process, their mounts, its cgroups), and making the harness itself
non-dumpable. Cgroups: ``sandbox_cgroup.py``. Inside the worker: ``sandbox_enter.py``.

Why these mechanisms: ``unshare``, ``mount`` and ``flock`` exist on every Debian machine and
on the GPU machines (bubblewrap and nsjail do not, and nothing can be installed there); a uid
per worker makes every sibling, every file the harness writes and the harness's memory
unreachable by plain Unix permissions; the PID namespace makes every descendant die with the
worker; the network namespace has only a loopback that is down (abstract unix sockets are
per network namespace); the IPC namespace takes SysV shared memory, semaphores and message
queues with it when the worker dies.

Does not cover: seccomp (no system-call filter: the kernel's surface is reachable), the GPU
itself (device nodes stay open to the worker: another process's GPU memory is protected by
the driver, not by us). Where a mechanism is unavailable the result's ``sandbox`` says which.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import glob
import json
import logging
import os
import pwd
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

from ...shared.sandbox_enter import COVERED, INNER, Spec, hidden_ancestor  # noqa: F401 - hidden_ancestor: part of this API
from . import sandbox_cgroup

log = logging.getLogger("davinci_kernel.evaluate")

UID_BASE = 61000  # worker uids: UID_BASE .. UID_BASE + UID_SPAN - 1, one per live worker on the machine
UID_SPAN = 4000
UID_LOCKS = ("/run/dvk-uids", "/var/lock/dvk-uids")
OWNER = ".owner"  # in a harness's folder: "pid starttime" of the harness process that made it
STALE_PLACES = ("/tmp", "/dev/shm", "/var/tmp")

NAMESPACES = ["--ipc", "--uts", "--cgroup", "--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc",
              "--propagation", "private"]
OLD_NAMESPACES = ["--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--propagation", "private"]


@dataclass
class Caps:
    """What this machine allows: probed once per process."""

    namespaces: bool = False  # unshare works
    ns_args: list[str] = field(default_factory=list)  # the unshare options that worked
    user_ns: bool = False  # only through ``unshare --user`` (not root): no uid separation
    uid_switch: bool = False  # running as root: each worker gets a uid of its own
    worker_userns: bool = False  # each worker makes a user namespace of its own after the uid switch
    tmpfs_root: bool = False  # each worker pivots into a tmpfs root
    scratch_tmpfs: bool = False  # scratch folders are tmpfs mounts of their own
    cgroup: Optional[str] = None  # a writable cgroup v2 folder to make worker cgroups in
    cgroup_v1: dict = field(default_factory=dict)  # writable v1 hierarchies (memory, cpu, pids)
    missing: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = []
        if self.namespaces:
            ns = ["userns"] if self.worker_userns or self.user_ns else []
            ns += [n for flag, n in (("--ipc", "ipcns"), ("--uts", "utsns"), ("--cgroup", "cgroupns"))
                   if flag in self.ns_args]
            parts.append("+".join(ns + ["netns", "pidns", "mountns"]))
        if self.uid_switch:
            parts.append("uid")
        if self.tmpfs_root:
            parts.append("tmpfsroot")
        if self.cgroup or self.cgroup_v1:
            parts.append("cgroup")
        parts.append("rlimits")
        text = ",".join(parts)
        return text + (f"; missing: {', '.join(self.missing)}" if self.missing else "")

    def cgroup_parents(self) -> list[str]:
        return [self.cgroup] if self.cgroup else list(self.cgroup_v1.values())


# --------------------------------------------------------------------------- probing
def _try(argv: list[str], timeout: float = 30) -> Optional[subprocess.CompletedProcess]:
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _probe_namespaces(caps: Caps, root: bool) -> None:
    exe = shutil.which("unshare")
    if exe is None:
        caps.missing.append("namespaces (no unshare binary)")
        return
    variants = [NAMESPACES, OLD_NAMESPACES] if root else []
    variants += [["--user", "--map-root-user", *NAMESPACES], ["--user", "--map-root-user", *OLD_NAMESPACES]]
    for args in variants:
        r = _try([exe, *args, "--", "true"])
        if r is not None and r.returncode == 0:
            caps.namespaces, caps.user_ns = True, "--user" in args
            caps.ns_args = [a for a in args if a not in ("--user", "--map-root-user")]
            break
    if not caps.namespaces:
        caps.missing.append("namespaces (unshare refused)")
    elif caps.ns_args == OLD_NAMESPACES:
        caps.missing.append("IPC, UTS and cgroup namespaces")


def _probe_worker(caps: Caps) -> None:
    """Enter the real sandbox once in a trial worker: does the tmpfs root hold, does the
    worker get a user namespace of its own?"""
    lease = UidLease.take()
    scratch, root = None, tempfile.mkdtemp(prefix="dvk-probe-")
    mark_owner(root)
    try:
        scratch = Scratch(root, lease.uid, 64 << 20, tmpfs=caps.scratch_tmpfs)
        spec = Spec(scratch=scratch.path, uid=lease.uid, mounts=True, userns=True, expose=runtime_paths())
        argv = launch_argv(caps, "davinci_kernel.evaluate.shared.sandbox_enter", [json.dumps(asdict(spec))])
        env = worker_env({}, INNER)
        r = subprocess.run(argv, capture_output=True, timeout=60, env=env, cwd=scratch.path, stdin=subprocess.DEVNULL)
        facts = json.loads(r.stdout.decode().strip().splitlines()[-1]) if r.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        facts = {}
    finally:
        if scratch is not None:
            scratch.remove()
        remove_tree(root)
        lease.release()
    caps.tmpfs_root = bool(facts.get("root"))
    caps.worker_userns = bool(facts.get("userns"))
    if not caps.tmpfs_root:
        caps.missing.append("tmpfs root (shared folders covered by empty tmpfs instead)")
    if not caps.worker_userns:
        caps.missing.append("user namespace per worker")


@functools.lru_cache(maxsize=1)
def probe() -> Caps:
    """What sandboxing this machine allows. Logs one line when something is missing."""
    caps = Caps()
    root = os.geteuid() == 0
    _probe_namespaces(caps, root)
    if root and caps.namespaces and not caps.user_ns:
        caps.uid_switch = True
        caps.scratch_tmpfs = _can_mount_tmpfs()
        if not caps.scratch_tmpfs:
            caps.missing.append("scratch tmpfs (a plain folder instead)")
        _probe_worker(caps)
    elif root:
        caps.missing.append("uid per worker (needs a mount namespace to keep the runtime readable)")
    else:
        caps.missing.append("uid per worker (not root)")
    if root:
        caps.cgroup = sandbox_cgroup.v2_parent()
        if caps.cgroup is None:
            caps.cgroup_v1 = sandbox_cgroup.v1_parents()
    if not caps.cgroup_parents():
        caps.missing.append("cgroup (rlimits only)")
    elif caps.cgroup is None and "cpu" not in caps.cgroup_v1:
        caps.missing.append("cgroup CPU quota")
    if caps.missing:
        log.warning("evaluator sandbox: %s", caps.describe())
    return caps


def _can_mount_tmpfs() -> bool:
    d = tempfile.mkdtemp(prefix="dvk-probe-")
    try:
        r = _try(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", d])
        ok = r is not None and r.returncode == 0
        if ok:
            _try(["umount", "-l", d])
        return ok
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(d)


def harden_harness() -> bool:
    """The harness process: not dumpable, so no process of another uid (and, with Yama, none
    of ours) can ptrace it or open its /proc/PID/mem. Returns whether prctl succeeded."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_DUMPABLE = 4
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


# --------------------------------------------------------------------------- uids
class UidLease:
    """A worker uid held through an exclusive ``flock`` on ``<lock dir>/<uid>.lock``. The
    lock is on the open file: released when every copy of the descriptor is closed (the
    harness's at teardown, the launcher's when the worker's last process is gone)."""

    def __init__(self, uid: int, fd: Optional[int]):
        self.uid, self.fd = uid, fd

    @staticmethod
    def lock_dir() -> Optional[str]:
        for d in UID_LOCKS:
            try:
                os.makedirs(d, mode=0o700, exist_ok=True)
                if os.access(d, os.W_OK):
                    return d
            except OSError:
                continue
        return None

    @classmethod
    def take(cls) -> UidLease:
        d = cls.lock_dir()
        start = random.randrange(UID_SPAN)
        for i in range(UID_SPAN):
            uid = UID_BASE + (start + i) % UID_SPAN
            if d is None:
                return cls(uid, None)
            with contextlib.suppress(KeyError):
                pwd.getpwuid(uid)
                continue  # a real account of the host
            fd = os.open(os.path.join(d, f"{uid}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return cls(uid, fd)
            except OSError:
                os.close(fd)
        raise RuntimeError(f"no free worker uid in {UID_BASE}..{UID_BASE + UID_SPAN - 1}")

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


# --------------------------------------------------------------------------- scratch
class Scratch:
    """A worker's scratch folder: a tmpfs of ``size`` bytes where the harness may mount one
    (else a plain folder), owned by the worker's uid, with the subfolders its caches need."""

    SUBS = ("tmp", "shm", "cache", "triton", "ext", "inductor", "out")

    def __init__(self, root: str, uid: Optional[int], size: int, tmpfs: bool):
        self.path = tempfile.mkdtemp(prefix="w-", dir=root)
        self.mounted = False
        if tmpfs:
            owner = f",uid={uid},gid={uid}" if uid is not None else ""
            r = _try(["mount", "-t", "tmpfs", "-o", f"size={max(size, 1 << 20)},mode=0700,nosuid,nodev{owner}",
                      "tmpfs", self.path])
            self.mounted = r is not None and r.returncode == 0
        for sub in self.SUBS:
            os.mkdir(os.path.join(self.path, sub))
            if uid is not None:
                os.chown(os.path.join(self.path, sub), uid, uid)
        if uid is not None:
            os.chown(self.path, uid, uid)
        os.chmod(self.path, 0o700)

    def remove(self) -> None:
        """Never raises: unmount (everything the worker wrote goes with it), then remove."""
        if self.mounted:
            _try(["umount", "-l", self.path])
            self.mounted = False
        remove_tree(self.path)


def remove_tree(path: str) -> None:
    """Remove a folder whatever is inside (a tree deeper than Python's recursion limit, files
    without permissions, mounts): rmtree first, then ``rm -rf``. Never raises."""
    if not os.path.lexists(path):
        return

    top = os.path.abspath(path)

    def again(func, p, _exc):  # permissions inside the tree only: never the folder that holds it
        with contextlib.suppress(OSError):
            parent = os.path.dirname(os.path.abspath(p))
            if parent.startswith(top.rstrip("/") + "/") or parent == top:
                os.chmod(parent, 0o700)
            os.chmod(p, 0o700) if os.path.isdir(p) and not os.path.islink(p) and p != top else None
            func(p)

    try:
        shutil.rmtree(path, onerror=again)
    except BaseException:  # noqa: BLE001 - RecursionError on a deep tree, anything else: rm takes over
        pass
    if os.path.lexists(path):
        _try(["rm", "-rf", "--one-file-system", path], timeout=120)
    if os.path.lexists(path):
        log.warning("evaluator sandbox: could not remove %s", path)


def mark_owner(folder: str) -> None:
    """Record this process as the owner of a harness folder (for ``sweep_stale``)."""
    with contextlib.suppress(OSError):
        with open(os.path.join(folder, OWNER), "w") as fh:
            fh.write(f"{os.getpid()} {_start_time(os.getpid())}")


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


UNMARKED_AGE_S = 600  # a harness folder with no owner this old was left by a harness killed as it made it
MARKED_PREFIXES = ("dvk-eval-", "dvk-pool-", "dvk-probe-")  # the folders a harness marks with its owner


def _owner_alive(folder: str) -> bool:
    try:
        with open(os.path.join(folder, OWNER)) as fh:
            pid, _, start = fh.read().strip().partition(" ")
    except FileNotFoundError:  # made but never marked (its harness died at once), or just made
        if not os.path.basename(folder).startswith(MARKED_PREFIXES):
            return True  # not a folder a harness marks: not ours to judge
        try:
            return time.time() - os.stat(folder).st_mtime < UNMARKED_AGE_S
        except OSError:
            return True
    except OSError:
        return True  # not ours to judge
    return pid.isdigit() and _start_time(int(pid)) == start and start != ""


def sweep_stale(places: tuple = STALE_PLACES) -> list[str]:
    """Remove what harness processes that no longer exist left behind: ``dvk-*`` folders
    whose ``.owner`` is dead (their mounts first), and their worker cgroups. Never raises."""
    removed = []
    try:
        for place in places:
            for folder in glob.glob(os.path.join(place, "dvk-*")):
                if os.path.isdir(folder) and not os.path.islink(folder) and not _owner_alive(folder):
                    for mnt in _mounts_under(folder):
                        _try(["umount", "-l", mnt])
                    remove_tree(folder)
                    removed.append(folder)
        caps = probe()
        sandbox_cgroup.sweep(caps.cgroup_parents())
    except Exception as e:  # noqa: BLE001 - a sweep never stops an evaluator from starting
        log.warning("evaluator sandbox: sweep of stale folders failed: %s", e)
    return removed


def _mounts_under(folder: str) -> list[str]:
    out = []
    with contextlib.suppress(OSError):
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                mnt = line.split()[4].replace("\\040", " ")
                if mnt == folder or mnt.startswith(folder.rstrip("/") + "/"):
                    out.append(mnt)
    return sorted(out, key=len, reverse=True)


# --------------------------------------------------------------------------- launching
def runtime_paths() -> list[str]:
    """Folders a worker must read: the interpreter, its libraries and this package."""
    import davinci_kernel

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(os.path.dirname(os.path.abspath(davinci_kernel.__file__)))}
    paths.update(p for p in sys.path if p and os.path.isdir(p))
    paths.update(p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            paths.add(os.environ[var])
    # a shared folder itself (a script run from /tmp puts /tmp on sys.path) would bring the
    # host's sockets and files back into the worker's root: only folders inside one travel
    hidden = {"/", *COVERED}
    return sorted({os.path.realpath(p) for p in paths if os.path.isdir(p)} - hidden)


def gpu_devices() -> list[str]:
    """The GPU's device nodes a worker binds into its /dev."""
    return sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/dri/renderD*"))


def worker_env(device_env: dict, scratch: str) -> dict:
    """A clean environment: nothing of the harness's secrets, caches inside the scratch folder
    (``scratch`` as the worker sees it)."""
    keep_prefix = ("CUDA_", "NVIDIA_", "TRITON_", "LD_", "NCCL_")
    keep = {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "CC", "CXX", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS"}
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith(keep_prefix)}
    import davinci_kernel

    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(davinci_kernel.__file__)))
    env.update({
        "HOME": scratch, "TMPDIR": os.path.join(scratch, "tmp"), "XDG_CACHE_HOME": os.path.join(scratch, "cache"),
        "TRITON_CACHE_DIR": os.path.join(scratch, "triton"), "TORCH_EXTENSIONS_DIR": os.path.join(scratch, "ext"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, "inductor"), "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1", "PYTHONPATH": os.pathsep.join([pkg_root] + [p for p in sys.path if p]),
        "PATH": env.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "USER": "dvk", "LOGNAME": "dvk",
    })
    env.update(device_env)
    return env


def launch_argv(caps: Caps, module: str, args: list[str]) -> list[str]:
    base = [sys.executable, "-m", module, *args]
    if not caps.namespaces:
        return base
    ns = (["--user", "--map-root-user"] if caps.user_ns else []) + caps.ns_args
    return [shutil.which("unshare") or "unshare", *ns, "--", *base]


def memory_limit_bytes(gb: float) -> Optional[int]:
    """``eval.worker_memory_gb``: > 0 as given; 0 = no limit; < 0 = half the host's memory."""
    if gb == 0:
        return None
    if gb > 0:
        return int(gb * (1 << 30))
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError):
        return None
