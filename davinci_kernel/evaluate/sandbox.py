"""The OS sandbox a candidate worker runs in, built from what Linux and util-linux provide.

Covers, on the harness side: probing once which mechanisms this machine allows (and saying
in one line what is missing), the command line that starts a worker inside fresh
namespaces (``unshare``: network, PID and mount namespaces, ``/proc`` of its own, the
worker killed when its launcher dies), the worker's clean environment, a private scratch
folder owned by the worker's own uid, a cgroup memory and process limit where cgroups are
writable, and making the harness itself non-dumpable (no ptrace, no ``/proc/PID/mem``).
On the worker side (``enter``, run as root inside the new namespaces before torch loads):
the world-writable folders (/tmp, /var/tmp, /dev/shm, …) become read-only and the scratch
folder is the one writable place; folders that other users cannot enter but the worker
must read (the Python installation, the virtual environment) are re-exposed read-only
under a tmpfs that hides the rest of them (e.g. ``/root`` with its caches); then the
process drops to an unprivileged uid of its own (one per worker), sets no-new-privileges
and its rlimits (processes, open files, CPU time, core dumps; host memory through the
cgroup, or ``RLIMIT_DATA`` on CPU workers where no cgroup can be made — ``RLIMIT_AS``
would break CUDA, which reserves address space of about twice the device memory).

Why these mechanisms: ``unshare`` and ``mount`` exist on every Debian machine and on the
GPU machines (bubblewrap and nsjail do not, and nothing can be installed there); a uid
per worker makes every sibling, every file the harness writes (skill library, baseline
cache, results, reference outputs) and the harness's memory unreachable by plain Unix
permissions; the PID namespace makes every descendant die with the worker; the network
namespace has only a loopback that is down.

Does not cover: seccomp (no system-call filter: the kernel's surface is reachable), the GPU
itself (device nodes stay open to the worker: another process's GPU memory is protected by
the driver, not by us), world-writable folders other than the usual temporary ones.
Where a mechanism is unavailable the result's ``sandbox`` field says which.
"""

from __future__ import annotations

import errno
import functools
import itertools
import logging
import os
import resource
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

log = logging.getLogger("davinci_kernel.evaluate")

UID_BASE = 61000  # worker uids: UID_BASE .. UID_BASE + UID_SPAN - 1, one per worker
UID_SPAN = 4000
_uids = itertools.count()

WRITABLE_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/dev/mqueue")

UNSHARE_ARGS = ["--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--propagation", "private"]


@dataclass
class Caps:
    """What this machine allows: probed once per process."""

    namespaces: bool = False  # unshare --net --pid --mount works
    user_ns: bool = False  # only through a user namespace (not root): no uid separation
    uid_switch: bool = False  # running as root: each worker gets a uid of its own
    cgroup: Optional[str] = None  # a writable cgroup folder to make worker cgroups in (v2), or None
    cgroup_v1_memory: Optional[str] = None  # a writable v1 memory controller folder
    missing: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = []
        if self.namespaces:
            parts.append("userns" if self.user_ns else "netns+pidns+mountns")
        if self.uid_switch:
            parts.append("uid")
        if self.cgroup or self.cgroup_v1_memory:
            parts.append("cgroup")
        parts.append("rlimits")
        text = ",".join(parts)
        return text + (f"; missing: {', '.join(self.missing)}" if self.missing else "")


def _cgroup_v2_parent() -> Optional[str]:
    root = "/sys/fs/cgroup"
    if not os.path.isfile(os.path.join(root, "cgroup.controllers")):
        return None
    try:
        with open("/proc/self/cgroup") as fh:
            own = next((ln.split("::", 1)[1].strip() for ln in fh if ln.startswith("0::")), "/")
    except OSError:
        own = "/"
    for base in (root, os.path.join(root, own.lstrip("/"))):
        try:
            with open(os.path.join(base, "cgroup.controllers")) as fh:
                ctrl = fh.read().split()
        except OSError:
            continue
        if "memory" not in ctrl or not os.access(base, os.W_OK):
            continue
        probe = os.path.join(base, f"dvk-probe-{os.getpid()}")
        try:
            os.mkdir(probe)
            ok = os.path.exists(os.path.join(probe, "memory.max"))
            os.rmdir(probe)
            if ok:
                return base
        except OSError:
            continue
    return None


def _cgroup_v1_memory() -> Optional[str]:
    base = "/sys/fs/cgroup/memory"
    if not os.path.isfile(os.path.join(base, "memory.limit_in_bytes")) or not os.access(base, os.W_OK):
        return None
    probe = os.path.join(base, f"dvk-probe-{os.getpid()}")
    try:
        os.mkdir(probe)
        os.rmdir(probe)
        return base
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def probe() -> Caps:
    """What sandboxing this machine allows. Logs one line when something is missing."""
    caps = Caps()
    root = os.geteuid() == 0
    exe = shutil.which("unshare")
    if exe is None:
        caps.missing.append("namespaces (no unshare binary)")
    else:
        variants = [UNSHARE_ARGS] if root else []
        variants.append(["--user", "--map-root-user"] + UNSHARE_ARGS)
        for args in variants:
            try:
                r = subprocess.run([exe, *args, "--", "true"], capture_output=True, timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if r.returncode == 0:
                caps.namespaces, caps.user_ns = True, "--user" in args
                break
        if not caps.namespaces:
            caps.missing.append("namespaces (unshare refused)")
    if root and caps.namespaces and not caps.user_ns:
        caps.uid_switch = True
    elif root:
        caps.missing.append("uid per worker (needs a mount namespace to keep the runtime readable)")
    else:
        caps.missing.append("uid per worker (not root)")
    if root:
        caps.cgroup = _cgroup_v2_parent()
        if caps.cgroup is None:
            caps.cgroup_v1_memory = _cgroup_v1_memory()
    if not (caps.cgroup or caps.cgroup_v1_memory):
        caps.missing.append("cgroup memory limit (rlimits only)")
    else:
        sweep_cgroups(caps.cgroup or caps.cgroup_v1_memory)
    if caps.missing:
        log.warning("evaluator sandbox: %s", caps.describe())
    return caps


def sweep_cgroups(parent: str) -> None:
    """Remove worker cgroups left by harness processes that no longer exist (empty ones)."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith("dvk-")]
    except OSError:
        return
    for name in names:
        pid = name.split("-")[1] if name.count("-") >= 2 else ""
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            try:
                os.rmdir(os.path.join(parent, name))
            except OSError:
                pass


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


def next_uid() -> int:
    return UID_BASE + next(_uids) % UID_SPAN


# --------------------------------------------------------------------------- harness side
def runtime_paths() -> list[str]:
    """Folders a worker must read: the interpreter, its libraries and this package."""
    import davinci_kernel

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(os.path.dirname(os.path.abspath(davinci_kernel.__file__)))}
    paths.update(p for p in sys.path if p and os.path.isdir(p))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            paths.add(os.environ[var])
    return sorted(os.path.realpath(p) for p in paths if os.path.isdir(p))


def hidden_ancestor(path: str) -> Optional[str]:
    """The highest folder on ``path`` that other users cannot enter (mode lacks o+x), if any."""
    cur = "/"
    for part in [p for p in path.split("/") if p]:
        cur = os.path.join(cur, part)
        try:
            mode = os.stat(cur).st_mode
        except OSError:
            return None
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return cur
    return None


def worker_env(device_env: dict, scratch: str) -> dict:
    """A clean environment: nothing of the harness's secrets, caches inside the scratch folder."""
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
        "PATH": env.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
    })
    env.update(device_env)
    return env


def make_scratch(root: str, uid: Optional[int]) -> str:
    """A folder only the worker (and root) can use, with the subfolders its caches need."""
    import tempfile

    d = tempfile.mkdtemp(prefix="w-", dir=root)
    for sub in ("tmp", "cache", "triton", "ext", "inductor", "out"):
        os.mkdir(os.path.join(d, sub))
    if uid is not None:
        for base, _dirs, _files in os.walk(d):
            os.chown(base, uid, uid)
    os.chmod(d, 0o700)
    return d


def launch_argv(caps: Caps, module: str, args: list[str]) -> list[str]:
    base = [sys.executable, "-m", module, *args]
    if not caps.namespaces:
        return base
    ns = (["--user", "--map-root-user"] if caps.user_ns else []) + UNSHARE_ARGS
    return [shutil.which("unshare") or "unshare", *ns, "--", *base]


class Cgroup:
    """A worker's cgroup (v2, or v1 memory only): a memory limit, a process limit, kill all."""

    def __init__(self, caps: Caps, name: str, memory_bytes: Optional[int], pids: int):
        self.path = None
        self.v1 = False
        parent = caps.cgroup or caps.cgroup_v1_memory
        if parent is None:
            return
        self.v1 = caps.cgroup is None
        path = os.path.join(parent, name)
        try:
            os.mkdir(path)
            if self.v1:
                if memory_bytes:
                    _write(os.path.join(path, "memory.limit_in_bytes"), str(memory_bytes))
            else:
                if memory_bytes:
                    _write(os.path.join(path, "memory.max"), str(memory_bytes))
                    _write(os.path.join(path, "memory.swap.max"), "0", missing_ok=True)
                _write(os.path.join(path, "pids.max"), str(pids), missing_ok=True)
            self.path = path
        except OSError as e:
            log.warning("evaluator sandbox: cannot make cgroup %s: %s", path, e)
            try:
                os.rmdir(path)
            except OSError:
                pass

    def add(self, pid: int) -> bool:
        if self.path is None:
            return False
        try:
            _write(os.path.join(self.path, "cgroup.procs"), str(pid))
            return True
        except OSError:
            return False

    def oom_killed(self) -> bool:
        if self.path is None:
            return False
        try:
            with open(os.path.join(self.path, "memory.oom_control" if self.v1 else "memory.events")) as fh:
                text = fh.read()
        except OSError:
            return False
        for line in text.splitlines():
            k, _, v = line.partition(" ")
            if k in ("oom_kill", "under_oom") and v.strip() not in ("", "0"):
                return True
        return False

    def kill(self) -> None:
        if self.path is not None and not self.v1:
            _write(os.path.join(self.path, "cgroup.kill"), "1", missing_ok=True)

    def remove(self) -> None:
        if self.path is None:
            return
        self.kill()
        for _ in range(1500):  # until its last process has exited (30 s at most)
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY:
                    return
                time.sleep(0.02)


def _write(path: str, text: str, missing_ok: bool = False) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(text)
    except FileNotFoundError:
        if not missing_ok:
            raise
    except OSError:
        if not missing_ok:
            raise


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


# --------------------------------------------------------------------------- worker side
@dataclass
class Spec:
    """What ``enter`` does inside the worker (sent on its command line as JSON)."""

    scratch: str
    uid: Optional[int] = None  # drop to this uid (root only)
    mounts: bool = False  # inside a fresh mount namespace: read-only tmp folders, scratch writable
    expose: list[str] = field(default_factory=list)  # runtime folders to keep readable under hidden parents
    cpu_seconds: int = 3600
    nproc: int = 1024
    nofile: int = 4096
    data_bytes: Optional[int] = None  # RLIMIT_DATA where no cgroup limits memory (CPU workers only)


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def _private_mounts(spec: Spec) -> list[str]:
    """Read-only temporary folders, scratch writable, hidden parents of the runtime re-exposed."""
    notes = []
    hidden: dict[str, list[str]] = {}
    tops = [p for p in spec.expose if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in spec.expose)]
    for p in tops:
        a = hidden_ancestor(p)
        if a is not None and a != p:
            hidden.setdefault(a, []).append(p)
    for anc, paths in hidden.items():
        fds = {p: os.open(p, os.O_PATH | os.O_DIRECTORY) for p in paths}
        try:
            _mount("-t", "tmpfs", "-o", "mode=0755,size=1m", "tmpfs", anc)
            for p, fd in fds.items():
                if not os.path.isdir(p):
                    os.makedirs(p)
                _mount("--no-canonicalize", "--bind", f"/proc/{os.getpid()}/fd/{fd}", p)
                _mount("-o", "remount,bind,ro", p)
        except (subprocess.CalledProcessError, OSError) as e:
            notes.append(f"could not re-expose {anc}: {e}")
        finally:
            for fd in fds.values():
                os.close(fd)
    for d in WRITABLE_TMP:
        if os.path.isdir(d) and not os.path.islink(d):
            try:
                _mount("--bind", d, d)
                _mount("-o", "remount,bind,ro", d)
            except subprocess.CalledProcessError as e:
                notes.append(f"{d} stays writable: {e.stderr.decode(errors='replace').strip()[:100]}")
    _mount("--bind", spec.scratch, spec.scratch)
    _mount("-o", "remount,bind,rw", spec.scratch)
    return notes


def enter(spec: Spec) -> list[str]:
    """Inside the worker, before torch loads: mounts, uid, no-new-privileges, rlimits.
    Returns notes on what could not be done (the worker reports them)."""
    notes = []
    if spec.mounts:
        try:
            notes += _private_mounts(spec)
        except (subprocess.CalledProcessError, OSError) as e:
            notes.append(f"mounts failed: {e}")
    for res, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, spec.nofile),
                       (resource.RLIMIT_CPU, spec.cpu_seconds), (resource.RLIMIT_NPROC, spec.nproc)):
        try:
            resource.setrlimit(res, (value, value))
        except (ValueError, OSError) as e:
            notes.append(f"rlimit {res}: {e}")
    if spec.data_bytes:
        try:
            resource.setrlimit(resource.RLIMIT_DATA, (spec.data_bytes, spec.data_bytes))
        except (ValueError, OSError) as e:
            notes.append(f"RLIMIT_DATA: {e}")
    if spec.uid is not None:
        os.setgroups([])
        os.setgid(spec.uid)
        os.setuid(spec.uid)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_NO_NEW_PRIVS = 38
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            notes.append("no_new_privs refused")
    except (OSError, AttributeError):
        notes.append("no_new_privs unavailable")
    os.chdir(spec.scratch)
    os.umask(0o077)
    return notes
