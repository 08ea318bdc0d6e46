"""Worker processes: candidate workers serve one candidate and are killed, started ahead;
the sandbox they run in; the JSON channel."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from davinci_kernel.evaluate.harness.isolation import sandbox
from davinci_kernel.evaluate.harness.isolation.procs import device_env
from davinci_kernel.evaluate.harness.pool import LocalPool
from davinci_kernel.evaluate.shared.protocol import Channel, ProtocolError


def test_every_candidate_gets_a_fresh_worker_and_the_next_is_started_ahead():
    pool = LocalPool(["cpu"], spares=1)
    try:
        slot, w1 = pool.acquire()
        started = pool.started
        assert w1.alive() and started == 3  # 1 slot + 1 spare at start, a replacement now
        pool.release(slot, w1)
        assert not w1.alive() and not os.path.exists(w1.scratch)  # killed, its folder gone
        slot, w2 = pool.acquire()
        assert w2.proc.pid != w1.proc.pid and w2.alive()
        pool.release(slot, w2)
        with pool.reference("cpu") as ref:
            assert ref.alive() and ref.uid is None  # the trusted process is not sandboxed
    finally:
        pool.close()


def test_sandboxed_worker_runs_as_its_own_uid_without_network(cpu_evaluator):
    """Two workers of the session evaluator's pool (two CPU slots), taken and given back as
    an evaluation would."""
    caps = sandbox.probe()
    if not caps.uid_switch:
        pytest.skip(f"this machine cannot switch uids: {caps.describe()}")
    pool = cpu_evaluator.pool
    (s1, w1), (s2, w2) = pool.acquire(), pool.acquire()
    try:
        assert w1.info["uid"] != w2.info["uid"] and w1.info["uid"] >= sandbox.UID_BASE
        assert w1.info["pid"] == 1  # PID namespace: it sees only its own processes
        assert "netns" in w1.sandbox_desc and "uid" in w1.sandbox_desc
    finally:
        pool.release(s1, w1)
        pool.release(s2, w2)


def test_freeze_stops_the_whole_tree(cpu_evaluator):
    """A worker of the session evaluator's pool, taken and given back as an evaluation would."""
    pool = cpu_evaluator.pool
    slot, w = pool.acquire()
    try:
        w.freeze()
        if w._frozen_by_cgroup:  # cgroup v2: the kernel says the whole cgroup is frozen
            events = open(os.path.join(w.cgroup.path, "cgroup.events")).read()
            assert "frozen 1" in events, events
        else:
            states = {pid: open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] for pid in w.tree()}
            assert states and all(s in "Tt" for s in states.values()), states
        assert w.is_stopped()  # what the gate's callers (and the GPU test of two workers) read
        w.thaw()
        if w._frozen_by_cgroup:
            assert "frozen 0" in open(os.path.join(w.cgroup.path, "cgroup.events")).read()
        assert not w.is_stopped()
    finally:
        pool.release(slot, w)


def test_hidden_ancestor():
    import tempfile
    from pathlib import Path

    tmp_path = Path(tempfile.mkdtemp(dir="/tmp" if os.path.isdir("/tmp") else None))
    secret = tmp_path / "secret"
    inner = secret / "lib" / "python"
    inner.mkdir(parents=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(secret, 0o700)
    assert sandbox.hidden_ancestor(str(inner)) == str(secret)
    os.chmod(secret, 0o755)
    assert sandbox.hidden_ancestor(str(inner)) is None
    import shutil

    shutil.rmtree(tmp_path)


def test_worker_env_carries_no_secrets(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("HF_TOKEN", "hf-secret")
    env = sandbox.worker_env(device_env("cpu"), str(tmp_path))
    assert "OPENAI_API_KEY" not in env and "HF_TOKEN" not in env
    assert env["HOME"] == str(tmp_path) and env["TRITON_CACHE_DIR"].startswith(str(tmp_path))


def test_channel_is_json_and_refuses_garbage():
    a, b = socket.socketpair()
    ca, cb = Channel(a), Channel(b)
    ca.send({"event": "x", "v": [1, 2.5, None]})
    assert cb.recv(5) == {"event": "x", "v": [1, 2.5, None]}
    import pickle
    import struct

    data = pickle.dumps({"event": "x"})  # a pickle is not a message: it never reaches pickle.loads
    a.sendall(struct.pack(">I", len(data)) + data)
    with pytest.raises(ProtocolError):
        cb.recv(5)
    a.sendall(struct.pack(">I", 1 << 30))
    with pytest.raises(ProtocolError):
        cb.recv(5)


def test_worker_env_compiles_without_leftover_threads(tmp_path):
    """A torch.compile baseline in a worker must not leave threads or child processes that
    a later candidate would be blamed for (inductor's compile pool, a tqdm monitor)."""
    script = (
        "import os, threading\n"
        "from davinci_kernel.evaluate.shared.runtime import no_background_threads\n"
        "no_background_threads()\n"
        "import torch\n"
        "before = {t.ident for t in threading.enumerate()}\n"
        "f = torch.compile(lambda x: torch.relu(x) * 2 + 1)\n"
        "f(torch.randn(64)); f(torch.randn(64))\n"
        "new = [t.name for t in threading.enumerate() if t.ident not in before]\n"
        "kids = open(f'/proc/{os.getpid()}/task/{os.getpid()}/children').read().split()\n"
        "print(new, kids)\n"
    )
    env = {**os.environ, **device_env("cpu"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}  # cold
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[] []", r.stdout


@pytest.mark.parametrize("device", ["cpu", "cuda:0", "cuda:3"])
def test_worker_env_limits_cpu_threads(device):
    """A GPU worker gets a few CPU threads (not one per host core); a CPU worker one."""
    from davinci_kernel.evaluate.harness.isolation.procs import CPU_THREADS

    env = device_env(device)
    assert int(env["OMP_NUM_THREADS"]) == (1 if device == "cpu" else CPU_THREADS)


def test_an_evaluator_that_fails_to_start_leaves_nothing(monkeypatch):
    """A start that fails after the evaluator made its folder (here a Ctrl-C while its first
    candidate worker starts) stops what it started and removes the folder."""
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator
    from davinci_kernel.evaluate.harness import evaluator as evaluator_mod

    def interrupted(self, device):
        raise KeyboardInterrupt

    def running_children() -> set[int]:
        kids = set()
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/children") as fh:
                kids |= {int(p) for p in fh.read().split()}
        return {p for p in kids if _state(p) not in (None, "Z", "X")}

    made = []
    mkdtemp = evaluator_mod.tempfile.mkdtemp

    def recorded(*a, **kw):
        made.append(mkdtemp(*a, **kw))
        return made[-1]

    kids_before = running_children()  # other tests' evaluators may run beside this one
    monkeypatch.setattr(LocalPool, "_spawn", interrupted)
    monkeypatch.setattr(evaluator_mod.tempfile, "mkdtemp", recorded)
    with pytest.raises(KeyboardInterrupt):
        Evaluator(EvalConfig(device="cpu"), workers=1)
    assert made and not any(os.path.exists(d) for d in made), made
    left = running_children() - kids_before
    assert not left, f"processes left running: {left}"


def _state(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_sweep_takes_unmarked_harness_folders_only_when_old(tmp_path):
    """A harness folder that never got its owner mark (its harness died as it made it) is
    swept once it is older than UNMARKED_AGE_S; a fresh one, and folders of other names, stay."""
    import time

    old = time.time() - sandbox.UNMARKED_AGE_S - 60
    made = {}
    for name in ("dvk-eval-old", "dvk-eval-new", "dvk-bench-triton-old"):
        made[name] = tmp_path / name
        made[name].mkdir()
        if name.endswith("old"):
            os.utime(made[name], (old, old))
    removed = sandbox.sweep_stale(places=(str(tmp_path),))
    assert removed == [str(made["dvk-eval-old"])]
    assert made["dvk-eval-new"].exists() and made["dvk-bench-triton-old"].exists()


def test_remove_tree_never_touches_the_folder_that_holds_it(tmp_path):
    """A tree that cannot be removed (a mount inside it is busy) leaves the permissions of the
    folder holding it as they were: /tmp and /dev/shm stay open to every user."""
    import subprocess

    holder = tmp_path / "holder"
    holder.mkdir()
    os.chmod(holder, 0o1777)
    tree = holder / "dvk-eval-x"
    (tree / "w").mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(tree / "w")],
                      capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a tmpfs")
    try:
        sandbox.remove_tree(str(tree))
        assert oct(os.stat(holder).st_mode & 0o7777) == oct(0o1777)
    finally:
        subprocess.run(["umount", "-l", str(tree / "w")], capture_output=True)
        sandbox.remove_tree(str(tree))
    assert not tree.exists()
