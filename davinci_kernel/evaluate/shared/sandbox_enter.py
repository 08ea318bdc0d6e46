"""Inside a candidate worker, before torch loads: build the worker's own world, then give up
every privilege. Runs as root in the fresh namespaces ``sandbox.launch_argv`` made (mount,
PID, network, IPC, UTS, cgroup), in the worker process itself, before any candidate code.

Covers, in this order:
  1. the root: a small tmpfs that becomes ``/`` (``pivot_root``), holding read-only binds of
     what a worker needs (``/usr``, ``/bin``, ``/lib*``, ``/etc``, ``/opt``, the Python
     installation, the virtual environment, this package, ``CUDA_HOME``), ``/dev`` with
     only ``null``/``zero``/``full``/``random``/``urandom``/``tty`` and the GPU's nodes, a
     fresh ``/proc``, ``/sys`` read-only, and the scratch (the harness's per-worker tmpfs)
     as the one writable place, at ``INNER`` (``/tmp/w``; ``/tmp`` and ``/var/tmp`` are
     empty and read-only, ``/dev/shm`` leads into the scratch). ``/etc/passwd`` and ``/etc/group`` are
     replaced with files naming the worker's uid (torch and Triton call ``getpwuid``).
     Nothing else of the host is visible: no ``/run``, ``/tmp``, ``/home``, no socket
     files. Then the root itself becomes read-only. Where ``pivot_root`` fails, the
     fallback covers ``/tmp``, ``/var/tmp``, ``/dev/shm``, ``/run`` and the lock folders
     with fresh empty tmpfs mounts and re-exposes the runtime under hidden parents (a note
     says so; the result's ``sandbox`` then lacks ``tmpfsroot``).
  2. the host name (UTS namespace), the rlimits (core 0, open files, CPU seconds, processes
     of the uid, file size, data where no cgroup limits memory);
  3. the uid: the worker drops to its own uid (the harness holds that uid's lock for the
     worker's life; the launcher's copy of the lock descriptor is closed here), then
     creates a user namespace mapping only that uid (``uid_map`` ``U U 1``). Every mount
     above was made by the host's root before it, so inside the new user namespace all of
     them are locked: nothing can unmount the tmpfs root or make a read-only bind
     writable, even with the capabilities the namespace grants at first. Those are then
     dropped (bounding set, ambient, effective/permitted/inheritable), nested user
     namespaces are forbidden (``user.max_user_namespaces = 0`` in it) and
     no-new-privileges is set. The worker joins a fresh session keyring, and its user
     keyring belongs to its own user namespace: no key outlives it or reaches another.
GPU device nodes keep working: they are bind-mounted character devices of mode 666, and a
device opened from a user namespace is checked by plain permissions. cgroup writes need
no privilege here: the harness placed the launcher in the worker's cgroup before exec.

Uses ctypes for mount, pivot_root, unshare, prctl, capset and keyctl; a candidate's code is
loaded only after ``enter`` returns. Does not cover: seccomp (no system-call filter), what
the harness does (``sandbox.py``).
"""

from __future__ import annotations

import json
import os
import platform
import resource
import stat
import sys
from dataclasses import dataclass, field
from typing import Optional

INNER = "/tmp/w"  # where the scratch is, seen from inside the worker
TOPS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
COVERED = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/var/run", "/run/lock", "/var/lock", "/dev/mqueue")

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
MNT_DETACH = 2
CLONE_NEWUSER = 0x10000000
_SYSCALLS = {"x86_64": {"pivot_root": 155, "capset": 126, "keyctl": 250},
             "aarch64": {"pivot_root": 41, "capset": 91, "keyctl": 219}}


@dataclass
class Spec:
    """What ``enter`` does inside the worker (sent on its command line as JSON)."""

    scratch: str  # the scratch folder's host path
    uid: Optional[int] = None  # drop to this uid (root only)
    mounts: bool = False  # inside a fresh mount namespace: build the worker's root
    userns: bool = False  # a user namespace of its own after the uid switch
    expose: list[str] = field(default_factory=list)  # runtime folders the worker reads
    devices: list[str] = field(default_factory=list)  # GPU device nodes to bind
    lock_fd: Optional[int] = None  # the launcher's copy of the uid lock: closed before candidate code
    cpu_seconds: int = 3600
    nproc: int = 1024
    nofile: int = 4096
    fsize_bytes: Optional[int] = None  # RLIMIT_FSIZE
    data_bytes: Optional[int] = None  # RLIMIT_DATA where no cgroup limits memory (CPU workers only)


class Libc:
    def __init__(self):
        import ctypes

        self.ct = ctypes
        self.c = ctypes.CDLL(None, use_errno=True)
        self.nr = _SYSCALLS.get(platform.machine(), {})

    def check(self, ret: int, what: str) -> int:
        if ret == -1:
            e = self.ct.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")
        return ret

    def mount(self, src: Optional[str], target: str, fstype: Optional[str], flags: int, data: Optional[str] = None):
        enc = (lambda s: s.encode() if s is not None else None)
        self.check(self.c.mount(enc(src), enc(target), enc(fstype), self.ct.c_ulong(flags), enc(data)),
                   f"mount {src} on {target}")

    def syscall(self, name: str, *args) -> int:
        if name not in self.nr:
            raise OSError(0, f"sys {name}: unknown on {platform.machine()}")
        return self.check(self.c.syscall(self.nr[name], *args), f"sys {name}")

    def prctl(self, *args: int) -> int:
        return self.check(self.c.prctl(*[self.ct.c_ulong(a) for a in args]), f"prctl {args[0]}")


# --------------------------------------------------------------------------- the root
def _bind(lc: Libc, src_fd: int, target: str, flags: int) -> None:
    lc.mount(f"/proc/self/fd/{src_fd}", target, None, MS_BIND | MS_REC)  # with what is mounted inside (a driver's libraries)
    if flags:
        lc.mount(None, target, None, MS_REMOUNT | MS_BIND | flags)


def _plan(spec: Spec) -> tuple[list, list]:
    """(binds as (inner path, host path, extra flags), symlinks as (inner path, target))."""
    binds, links = [], []
    ro = MS_RDONLY | MS_NOSUID | MS_NODEV
    for top in TOPS:
        host = "/" + top
        if os.path.islink(host):
            links.append((host, os.readlink(host)))
        elif os.path.isdir(host):
            binds.append((host, host, ro))
    covered = [b[0] for b in binds]
    for p in sorted(set(spec.expose)):
        if not any(p == c or p.startswith(c.rstrip("/") + "/") for c in covered):
            binds.append((p, p, ro))
            covered.append(p)
    for d in list(DEVICES) + list(spec.devices):
        if os.path.exists(d):
            binds.append((d, d, MS_NOSUID))
    binds.append(("/sys", "/sys", ro | MS_NOEXEC))
    binds.append((INNER, spec.scratch, MS_NOSUID | MS_NODEV))
    links += [("/dev/fd", "/proc/self/fd"), ("/dev/stdin", "/proc/self/fd/0"), ("/dev/stdout", "/proc/self/fd/1"),
              ("/dev/stderr", "/proc/self/fd/2"), ("/dev/shm", INNER + "/shm")]
    binds.sort(key=lambda b: b[0].count("/"))  # parents before what goes inside them
    return binds, links


def passwd_text(uid: int, home: str) -> tuple[str, str]:
    """The worker's /etc/passwd and /etc/group: root, nobody and the worker's own uid."""
    passwd = (f"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
              f"dvk:x:{uid}:{uid}:dvk worker:{home}:/bin/sh\n")
    group = f"root:x:0:\nnogroup:x:65534:\ndvk:x:{uid}:\n"
    return passwd, group


def _build_root(lc: Libc, spec: Spec) -> None:
    binds, links = _plan(spec)
    fds = {host: os.open(host, os.O_PATH | os.O_CLOEXEC) for _inner, host, _f in binds}
    try:
        new = "/tmp" if os.path.isdir("/tmp") else "/mnt"
        lc.mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
        for sub in ("proc", "dev", "tmp", "var/tmp", "run", ".old", ".dvk"):
            os.makedirs(new + "/" + sub, exist_ok=True)
        for inner, target in links:
            os.symlink(target, new + inner)
        for inner, host, flags in binds:
            where = new + inner
            if stat.S_ISDIR(os.stat(fds[host]).st_mode):
                os.makedirs(where, mode=0o755, exist_ok=True)
            elif not os.path.exists(where):
                open(where, "w").close()
            _bind(lc, fds[host], where, flags)
        lc.mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        if spec.uid is not None:
            passwd, group = passwd_text(spec.uid, INNER)
            for name, text in (("passwd", passwd), ("group", group)):
                with open(f"{new}/.dvk/{name}", "w") as fh:
                    fh.write(text)
                if os.path.exists(f"{new}/etc/{name}"):
                    fd = os.open(f"{new}/.dvk/{name}", os.O_PATH | os.O_CLOEXEC)
                    try:
                        _bind(lc, fd, f"{new}/etc/{name}", MS_RDONLY | MS_NOSUID | MS_NODEV)
                    finally:
                        os.close(fd)
        os.chdir(new)
        lc.syscall("pivot_root", b".", b".old")
        os.chdir("/")
        lc.check(lc.c.umount2(b"/.old", MNT_DETACH), "umount old root")
        os.rmdir("/.old")
        lc.mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    finally:
        for fd in fds.values():
            os.close(fd)


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


def _cover(lc: Libc, spec: Spec) -> list[str]:
    """Fallback without pivot_root: fresh empty tmpfs over the shared folders, the scratch at
    INNER, runtime folders under parents other users cannot enter re-exposed read-only."""
    notes = []
    scratch_fd = os.open(spec.scratch, os.O_PATH | os.O_CLOEXEC)
    hidden: dict[str, list[str]] = {}
    for p in spec.expose:
        a = hidden_ancestor(p)
        if a is not None and a != p and spec.uid is not None:
            hidden.setdefault(a, []).append(p)
    try:
        for anc, paths in hidden.items():
            fds = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in paths}
            lc.mount("tmpfs", anc, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
            for p, fd in fds.items():
                os.makedirs(p, exist_ok=True)
                _bind(lc, fd, p, MS_RDONLY | MS_NOSUID | MS_NODEV)
                os.close(fd)
        for d in COVERED:
            if os.path.isdir(d) and not os.path.islink(d):
                try:
                    lc.mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=1m")
                except OSError as e:
                    notes.append(f"{d} not covered: {e}")
        os.makedirs(INNER, exist_ok=True)
        _bind(lc, scratch_fd, INNER, MS_NOSUID | MS_NODEV)
    finally:
        os.close(scratch_fd)
    return notes


# --------------------------------------------------------------------------- privileges
def _own_user_namespace(lc: Libc, uid: int) -> None:
    """A user namespace mapping only ``uid`` (the caller already runs as it)."""
    lc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc/self/uid_map stays ours to write after setuid
    lc.check(lc.c.unshare(CLONE_NEWUSER), "unshare user namespace")
    for name, text in (("uid_map", f"{uid} {uid} 1\n"), ("setgroups", "deny"), ("gid_map", f"{uid} {uid} 1\n")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)
    with open("/proc/sys/user/max_user_namespaces", "w") as fh:  # none nested inside it
        fh.write("0")


def _drop_capabilities(lc: Libc) -> None:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            last = int(fh.read())
    except (OSError, ValueError):
        last = 40
    for cap in range(last + 1):
        lc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
    lc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    header = (lc.ct.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (lc.ct.c_uint32 * 6)()  # effective, permitted, inheritable x 2: all zero
    lc.syscall("capset", header, data)


def _set_rlimits(spec: Spec, notes: list[str]) -> None:
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, spec.nofile),
              (resource.RLIMIT_CPU, spec.cpu_seconds), (resource.RLIMIT_NPROC, spec.nproc)]
    if spec.fsize_bytes:
        limits.append((resource.RLIMIT_FSIZE, spec.fsize_bytes))
    if spec.data_bytes:
        limits.append((resource.RLIMIT_DATA, spec.data_bytes))
    for res, value in limits:
        try:
            resource.setrlimit(res, (value, value))
        except (ValueError, OSError) as e:
            notes.append(f"rlimit {res}: {e}")


def _switch_uid(lc: Libc, spec: Spec, notes: list[str]) -> bool:
    """Drop to the worker's uid, then into its own user namespace. True when that namespace exists."""
    os.setgroups([])
    os.setgid(spec.uid)
    os.setuid(spec.uid)
    if not spec.userns:
        return False
    try:
        _own_user_namespace(lc, spec.uid)
        return True
    except OSError as e:
        notes.append(f"no user namespace: {e}")
        return False


def enter(spec: Spec) -> list[str]:
    """Inside the worker, before torch loads: root, host name, rlimits, uid, user namespace,
    keyring, capabilities, no-new-privileges. Returns notes on what could not be done."""
    notes: list[str] = []
    lc = Libc()
    if spec.lock_fd is not None:
        try:
            os.close(spec.lock_fd)
        except OSError:
            pass
    home = spec.scratch
    if spec.mounts:
        try:
            _build_root(lc, spec)
            home = INNER
        except OSError as e:
            notes.append(f"no tmpfs root ({e}); shared folders covered instead")
            try:
                notes += _cover(lc, spec)
                home = INNER
            except OSError as e2:
                notes.append(f"mounts failed: {e2}")
        try:
            lc.check(lc.c.sethostname(b"dvk-worker", 10), "sethostname")
        except OSError as e:
            notes.append(str(e))
    _set_rlimits(spec, notes)
    in_userns = _switch_uid(lc, spec, notes) if spec.uid is not None else False
    try:
        lc.syscall("keyctl", 1, None)  # KEYCTL_JOIN_SESSION_KEYRING: a fresh, anonymous one
    except OSError as e:
        notes.append(f"session keyring kept: {e}")
    try:
        if in_userns:
            _drop_capabilities(lc)
        lc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    except OSError as e:
        notes.append(f"privileges: {e}")
    from .worker_world import settle

    settle(home)
    return notes


def _probe_main(spec_json: str) -> None:
    """``python -m davinci_kernel.evaluate.shared.sandbox_enter SPEC``: enter, then report what holds."""
    spec = Spec(**json.loads(spec_json))
    notes = enter(spec)
    facts = {"notes": notes, "uid": os.getuid(), "cwd": os.getcwd(),
             "root": os.path.exists("/.dvk") and not os.path.exists("/.old"),
             "userns": open("/proc/self/uid_map").read().split() == [str(spec.uid)] * 2 + ["1"]
             if spec.uid is not None else False}
    print(json.dumps(facts), flush=True)


if __name__ == "__main__":
    _probe_main(sys.argv[1])

