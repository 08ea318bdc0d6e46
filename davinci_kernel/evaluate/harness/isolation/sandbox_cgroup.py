"""A candidate worker's cgroup, seen from the harness: made before the worker starts, the
launcher placed in it before exec (so every descendant is in it, and the worker's cgroup
namespace is rooted there), killed and removed at teardown.

Covers: cgroup v2 (``memory.max``, ``memory.swap.max``, ``pids.max``, ``cpu.max`` — a CPU
quota per worker so that one worker's busy children cannot slow a sibling's verdict —,
``cgroup.freeze``, ``cgroup.kill``) and, where only v1 hierarchies are writable, the v1
``memory``, ``cpu`` (CFS quota) and ``pids`` controllers (no freeze: the signal loop of
``procs.py`` stops v1 workers); finding a writable parent once per harness process; removing
worker cgroups left by harness processes that no longer exist (their processes killed).
Does not cover: the namespaces and the root (``sandbox.py``, ``sandbox_enter.py``).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from typing import Optional

log = logging.getLogger("davinci_kernel.evaluate")

ROOT = "/sys/fs/cgroup"
V1 = ("memory", "cpu", "pids")
PERIOD_US = 100_000


def _write(path: str, text: str, missing_ok: bool = False) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(text)
    except OSError:
        if not missing_ok:
            raise


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def _own_v2() -> str:
    for ln in _read("/proc/self/cgroup").splitlines():
        if ln.startswith("0::"):
            return ln.split("::", 1)[1].strip()
    return "/"


def v2_parent() -> Optional[str]:
    """A cgroup v2 folder this process may make worker cgroups in, with memory, cpu and pids
    enabled for its children where it can (at least memory), or None."""
    for base in (os.path.join(ROOT, _own_v2().lstrip("/")), ROOT):
        if not os.path.isfile(os.path.join(base, "cgroup.controllers")) or not os.access(base, os.W_OK):
            continue
        have = _read(os.path.join(base, "cgroup.controllers")).split()
        on = _read(os.path.join(base, "cgroup.subtree_control")).split()
        for ctl in ("memory", "cpu", "pids"):
            if ctl in have and ctl not in on:
                _write(os.path.join(base, "cgroup.subtree_control"), f"+{ctl}", missing_ok=True)
        probe = os.path.join(base, f"dvk-{os.getpid()}-probe")
        try:
            os.mkdir(probe)
            ok = os.path.exists(os.path.join(probe, "memory.max"))
            os.rmdir(probe)
            if ok:
                return base
        except OSError:
            continue
    return None


def v1_parents() -> dict[str, str]:
    """Writable v1 hierarchies (controller -> folder) for memory, cpu and pids."""
    found = {}
    for ctl in V1:
        base = os.path.join(ROOT, ctl)
        if not os.path.isfile(os.path.join(base, "cgroup.procs")) or not os.access(base, os.W_OK):
            continue
        probe = os.path.join(base, f"dvk-{os.getpid()}-probe")
        try:
            os.mkdir(probe)
            os.rmdir(probe)
            found[ctl] = base
        except OSError:
            continue
    return found if "memory" in found else {}


class Cgroup:
    """One worker's cgroup (v2, or v1 memory+cpu+pids): limits, freeze, kill, remove."""

    def __init__(self, v2: Optional[str], v1: dict[str, str], name: str, memory_bytes: Optional[int],
                 pids: int, cpu_cores: Optional[float]):
        self.paths: dict[str, str] = {}  # "v2" or a v1 controller -> folder
        self.v2 = False
        quota = None if not cpu_cores else max(1000, int(cpu_cores * PERIOD_US))
        parents = {"v2": v2} if v2 else dict(v1)
        for ctl, parent in parents.items():
            path = os.path.join(parent, name)
            try:
                os.mkdir(path)
                self.paths[ctl] = path
                self._limit(ctl, path, memory_bytes, pids, quota)
            except OSError as e:
                log.warning("evaluator sandbox: cannot make cgroup %s: %s", path, e)
                self.remove()
                return
        self.v2 = "v2" in self.paths

    @staticmethod
    def _limit(ctl: str, path: str, memory_bytes: Optional[int], pids: int, quota: Optional[int]) -> None:
        j = os.path.join
        if ctl == "v2":
            if memory_bytes:
                _write(j(path, "memory.max"), str(memory_bytes))
                _write(j(path, "memory.swap.max"), "0", missing_ok=True)
            _write(j(path, "pids.max"), str(pids), missing_ok=True)
            if quota:
                _write(j(path, "cpu.max"), f"{quota} {PERIOD_US}", missing_ok=True)
        elif ctl == "memory" and memory_bytes:
            _write(j(path, "memory.limit_in_bytes"), str(memory_bytes))
        elif ctl == "pids":
            _write(j(path, "pids.max"), str(pids), missing_ok=True)
        elif ctl == "cpu" and quota:
            _write(j(path, "cpu.cfs_period_us"), str(PERIOD_US), missing_ok=True)
            _write(j(path, "cpu.cfs_quota_us"), str(quota), missing_ok=True)

    @property
    def path(self) -> Optional[str]:
        return self.paths.get("v2") or self.paths.get("memory")

    def procs_files(self) -> list[str]:
        return [os.path.join(p, "cgroup.procs") for p in self.paths.values()]

    def cpu_quota(self) -> Optional[tuple[int, int]]:
        """(quota, period) in microseconds, as the kernel holds it, or None."""
        if "v2" in self.paths:
            q, _, p = _read(os.path.join(self.paths["v2"], "cpu.max")).strip().partition(" ")
        elif "cpu" in self.paths:
            q, p = (_read(os.path.join(self.paths["cpu"], f"cpu.cfs_{k}_us")).strip() for k in ("quota", "period"))
        else:
            return None
        return (int(q), int(p)) if q.lstrip("-").isdigit() and int(q) > 0 and p.isdigit() else None

    def pids(self) -> list[int]:
        out = set()
        for f in self.procs_files():
            out.update(int(x) for x in _read(f).split() if x.isdigit())
        return sorted(out)

    def oom_killed(self) -> bool:
        if not self.path:
            return False
        text = _read(os.path.join(self.path, "memory.events" if self.v2 else "memory.oom_control"))
        for line in text.splitlines():
            k, _, v = line.partition(" ")
            if k in ("oom_kill", "under_oom") and v.strip() not in ("", "0"):
                return True
        return False

    def freeze(self, frozen: bool, timeout: float = 2.0) -> bool:
        """v2: freeze or thaw every process in it and wait (up to ``timeout``) until the kernel
        says so. False where there is no v2 cgroup (the caller then uses signals); True once
        asked, even if a process has not frozen yet (``is_frozen`` says; one in the driver
        may take longer, and the caller then stops it with signals as well)."""
        if not self.v2:
            return False
        path = self.paths["v2"]
        try:
            _write(os.path.join(path, "cgroup.freeze"), "1" if frozen else "0")
        except OSError:
            return False
        want = f"frozen {1 if frozen else 0}"
        deadline = time.monotonic() + timeout
        while want not in _read(os.path.join(path, "cgroup.events")) and time.monotonic() < deadline:
            time.sleep(0.0005)
        return True

    def is_frozen(self) -> bool:
        """v2: the kernel says every process in it is frozen (``frozen 1`` in cgroup.events)."""
        return self.v2 and "frozen 1" in _read(os.path.join(self.paths["v2"], "cgroup.events"))

    def kill(self) -> None:
        """SIGKILL every process in it (v2: cgroup.kill; v1: each pid, a few passes)."""
        if self.v2:
            _write(os.path.join(self.paths["v2"], "cgroup.kill"), "1", missing_ok=True)
            return
        for _ in range(5):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)

    def remove(self, wait: float = 30.0) -> None:
        """Kill what is left, then remove the folders (once their last process has exited)."""
        if not self.paths:
            return
        self.kill()
        deadline = time.monotonic() + wait
        for ctl, path in list(self.paths.items()):
            while True:
                try:
                    os.rmdir(path)
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or time.monotonic() > deadline:
                        break
                    self.kill()
                    time.sleep(0.02)
            self.paths.pop(ctl, None)


def sweep(parents: list[str]) -> None:
    """Remove worker cgroups (``dvk-<pid>-…``) of harness processes that no longer exist,
    killing whatever still runs in them."""
    for parent in parents:
        try:
            names = [n for n in os.listdir(parent) if n.startswith("dvk-")]
        except OSError:
            continue
        for name in names:
            pid = name.split("-")[1] if name.count("-") >= 2 else ""
            if not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
                continue
            path = os.path.join(parent, name)
            if os.path.exists(os.path.join(path, "cgroup.kill")):
                _write(os.path.join(path, "cgroup.kill"), "1", missing_ok=True)
            else:
                for p in _read(os.path.join(path, "cgroup.procs")).split():
                    try:
                        os.kill(int(p), signal.SIGKILL)
                    except (OSError, ValueError):
                        pass
            for _ in range(100):
                try:
                    os.rmdir(path)
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY:
                        break
                    time.sleep(0.02)
