"""Candidate workers forked from the pre-imported zygote (``candidate/zygote.py``,
``harness/isolation/forkserver.py``): the same world as an exec'd worker, teardown that leaves nothing,
and the exec'd path when the zygote is gone."""

from __future__ import annotations

import json
import os
import time

import pytest
from sandbox_helpers import TASKS, _static_off  # noqa: E402

from davinci_kernel.evaluate.harness.isolation import forkserver, sandbox

pytestmark = pytest.mark.skipif(not forkserver.usable(sandbox.probe()),
                                reason="needs root and every namespace (the zygote makes them itself)")

# Not a kernel: it reports what its process sees, through the error the harness hands back.
PROBE = '''
import json, os, socket


def _facts():
    st = dict(ln.split(":\\t", 1) for ln in open("/proc/self/status").read().splitlines() if ":\\t" in ln)
    kinds = []
    for f in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            kinds.append(os.readlink(f"/proc/self/fd/{f}").split(":")[0])
        except OSError:
            pass
    return {"pid": os.getpid(), "root": os.getuid() == 0, "host": socket.gethostname(), "cwd": os.getcwd(),
            "procs": len([p for p in os.listdir("/proc") if p.isdigit()]),
            "uid_map": open("/proc/self/uid_map").read().split()[1:], "fds": sorted(kinds),
            "caps": st["CapEff"].strip(), "nnp": st["NoNewPrivs"].strip(), "ignored": st["SigIgn"].strip(),
            "blocked": st["SigBlk"].strip(), "env": sorted(os.environ), "umask": os.umask(0o077),
            "limits": [__import__("resource").getrlimit(r) for r in (4, 7, 1)]}


raise RuntimeError("FACTS" + json.dumps(_facts()))
'''


def _facts(prefork: bool, tmp_path) -> dict:
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator
    from davinci_kernel.tasks import load_task_file

    cfg = EvalConfig(device="cpu", code_policy="off", prefork=prefork, cache_dir=str(tmp_path / "cache"))
    with Evaluator(cfg, workers=1) as ev:
        r = ev.evaluate(load_task_file(TASKS / "relu.py"), PROBE)
    msg = r.error_msg or ""
    assert "FACTS" in msg, msg
    return json.loads(msg[msg.rindex("FACTS") + 5:].splitlines()[0])


# what a fresh interpreter has and nothing more: SIGPIPE (13) and SIGXFSZ (25) ignored, nothing blocked
FRESH_IGNORED, NONE_BLOCKED = f"{(1 << 12) | (1 << 24):016x}", "0" * 16


def _facts_inheriting(prefork: bool, tmp_path) -> dict:
    """``_facts`` from an evaluator in a child process started as ``nohup`` and a service
    manager may start one: SIGHUP ignored, SIGUSR1 blocked (both survive fork and exec)."""
    import signal
    import subprocess
    import sys

    def inherit():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})

    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import json, pathlib, sys; sys.path.insert(0, sys.argv[1]); from test_evaluate_forkserver import _facts; "
            "from sandbox_helpers import _static_off; _static_off(); print('FACTS' + json.dumps(_facts(sys.argv[2] == '1', pathlib.Path(sys.argv[3]))))")
    out = subprocess.run([sys.executable, "-c", code, here, "1" if prefork else "0", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, preexec_fn=inherit, cwd=here)
    assert "FACTS" in out.stdout, out.stderr[-2000:]
    return json.loads(out.stdout[out.stdout.rindex("FACTS") + 5:].splitlines()[0])


@pytest.mark.parametrize("inherited", [False, True], ids=["clean", "sighup-ignored-sigusr1-blocked"])
def test_forked_worker_sees_what_an_execd_one_sees(tmp_path, monkeypatch, inherited):
    """Everything a candidate can observe of its process (pid 1 of its own PID namespace,
    no root, no capabilities, no-new-privileges, only its channel and output as open files,
    the clean environment, signal dispositions and blocked signals, limits, umask) is the
    same whether the worker was forked from the zygote or exec'd through unshare, and
    whatever signals the process that started the harness ignored or blocked; only the
    leased uid differs."""
    from davinci_kernel.evaluate.harness.codepolicy import static

    monkeypatch.setattr(static, "check", static.check)  # restored after the test
    _static_off()
    facts = _facts_inheriting if inherited else _facts
    forked, execd = facts(True, tmp_path / "forked"), facts(False, tmp_path / "execd")
    assert forked["uid_map"][1] == "1" and forked["uid_map"] != ["0", "1"]
    forked.pop("uid_map"), execd.pop("uid_map")
    assert forked == execd
    assert forked["pid"] == 1 and forked["procs"] == 1 and not forked["root"]
    assert forked["caps"] == "0000000000000000" and forked["nnp"] == "1"
    assert forked["fds"] == ["/dev/null", "pipe", "pipe", "socket"]
    assert forked["ignored"] == FRESH_IGNORED and forked["blocked"] == NONE_BLOCKED, forked


def _launcher_state(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_pool_forks_workers_and_falls_back_to_exec(tmp_path):
    """A pool's workers come from its zygote; killed, the launcher reports SIGKILL and is
    reaped (no zombie stays); with the zygote gone, the next worker is exec'd; closing the
    pool ends the zygote."""
    from davinci_kernel.evaluate.harness.pool import LocalPool

    pool = LocalPool(["cpu"], spares=0)
    try:
        slot, w = pool.acquire(timeout=120)
        assert w.started_by == "fork" and w.info.get("pid") == 1
        launcher = w.proc.pid
        pool.release(slot, w)
        assert w.proc.returncode == -9
        deadline = time.monotonic() + 10
        while _launcher_state(launcher) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _launcher_state(launcher) is None, "the zygote did not reap the launcher"
        zygote = pool._forkservers["cpu"]._proc
        zygote.kill()
        zygote.wait()
        for _ in range(2):  # the first was started ahead, before the zygote died
            slot, w = pool.acquire(timeout=120)
            assert w.info.get("event") == "ready"
            pool.release(slot, w)
        assert w.started_by == "exec"
    finally:
        pool.close()
    assert all(fs._proc is None for fs in pool._forkservers.values())


def test_zygote_refuses_bad_requests(tmp_path):
    """A request without its descriptors is answered with an error, and the zygote goes on."""
    from davinci_kernel.evaluate.harness.isolation.procs import device_env

    fs = forkserver.ForkServer(device_env("cpu"), str(tmp_path))
    try:
        with fs._lock:
            fs._start()
            fs._sock.send(json.dumps({"cmd": "fork", "fds": ["channel"]}).encode())
            reply = json.loads(fs._sock.recv(1 << 16))
        assert "error" in reply
        from davinci_kernel.evaluate.harness.isolation.procs import WorkerProcess

        root = str(tmp_path / "w")
        os.makedirs(root, mode=0o711)
        w = WorkerProcess("candidate", "cpu", root, forkserver=fs)
        try:
            w.wait_ready(timeout=120)
            assert w.started_by == "fork"
        finally:
            w.kill()
    finally:
        fs.close()


def test_a_forked_worker_that_never_starts_turns_the_pool_to_exec(monkeypatch):
    """If a forked worker dies before it is ready (a GPU that will not start in a child forked
    after CUDA was touched, say), the pool disables its zygote and execs that worker and the
    ones after it."""
    from davinci_kernel.evaluate.harness.isolation.procs import WorkerProcess
    from davinci_kernel.evaluate.harness.pool import LocalPool
    from davinci_kernel.evaluate.shared.protocol import WorkerDied

    real = WorkerProcess.wait_ready

    def fork_fails(self, timeout=300.0):
        if self.started_by == "fork":
            raise WorkerDied("worker process died (signal 11)")
        return real(self, timeout)

    monkeypatch.setattr(WorkerProcess, "wait_ready", fork_fails)
    pool = LocalPool(["cpu"], spares=0)
    try:
        slot, w = pool.acquire(timeout=120)
        assert w.started_by == "exec" and w.info.get("event") == "ready"
        assert pool._forkservers["cpu"]._broken
        pool.release(slot, w)
        slot, w = pool.acquire(timeout=120)
        assert w.started_by == "exec"
        pool.release(slot, w)
    finally:
        pool.close()


def test_a_mapped_driver_library_is_not_a_started_cuda():
    """The zygote decides "CUDA was started" by the driver's state: with no driver loaded
    (this CPU machine) or a CUDA build of torch that only mapped ``libcuda.so`` at import,
    the driver answers "not initialised" and the zygote serves."""
    from davinci_kernel.evaluate.candidate import zygote

    assert zygote.driver_initialised() is False
    assert zygote._cuda_touched() is False


@pytest.mark.gpu
def test_zygote_serves_on_a_gpu_and_a_forked_worker_runs_a_kernel(tmp_path):
    """On a GPU machine the zygote (torch, Triton and the worker imported) serves: a pool's
    worker is forked, not exec'd, with no fall-back said; and an evaluator's forked worker
    initialises CUDA itself and runs a Triton kernel that is judged correct."""
    from conftest import FIXTURES, fixture_task

    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator
    from davinci_kernel.evaluate.harness.pool import LocalPool

    pool = LocalPool(["cuda:0"], spares=0)
    try:
        slot, w = pool.acquire(timeout=300)
        assert w.started_by == "fork" and w.info.get("event") == "ready"
        pool.release(slot, w)
        assert not any(fs.fallback_noted for fs in pool._forkservers.values())
    finally:
        pool.close()
    cfg = EvalConfig(device="cuda", prefork=True, cache_dir=str(tmp_path / "cache"))
    with Evaluator(cfg, workers=1) as ev:
        r = ev.evaluate(fixture_task("relu"), (FIXTURES / "legit" / "relu_triton.py").read_text())
    assert r.correct and r.speedup, (r.error_kind, r.error_msg)
