"""The local worker pool: spare workers replace recycled ones, fresh workers are unused."""

from __future__ import annotations

import pytest

from davinci_kernel.evaluate.pool import LocalPool


def test_spare_replaces_a_recycled_worker_and_fresh_is_unused():
    pool = LocalPool(["cpu"], spares=1)
    try:
        spare = pool._spares["cpu"].queue[0]
        h = pool.acquire()
        pool.release(h, recycle=True)
        got = pool.acquire()
        assert got is spare and got.proc.is_alive() and got.proc.pid != h.proc.pid
        assert pool._spares["cpu"].qsize() == 1  # the next spare is already starting
        new = pool.fresh(got)
        assert new.jobs == 0 and new.proc.pid not in (h.proc.pid, got.proc.pid) and not got.proc.is_alive()
        pool.release(new)
        assert pool.replaced == 2 and len(pool) == 1
    finally:
        pool.close()


def test_worker_env_compiles_without_leftover_threads(tmp_path):
    """A torch.compile baseline in a worker must not leave threads or child processes that
    a later candidate would be blamed for (inductor's compile pool, a tqdm monitor)."""
    import os
    import subprocess
    import sys

    from davinci_kernel.evaluate.pool import default_env

    script = (
        "import os, threading\n"
        "from davinci_kernel.evaluate.worker import no_background_threads\n"
        "no_background_threads()\n"
        "import torch\n"
        "before = {t.ident for t in threading.enumerate()}\n"
        "f = torch.compile(lambda x: torch.relu(x) * 2 + 1)\n"
        "f(torch.randn(64)); f(torch.randn(64))\n"
        "new = [t.name for t in threading.enumerate() if t.ident not in before]\n"
        "kids = open(f'/proc/{os.getpid()}/task/{os.getpid()}/children').read().split()\n"
        "print(new, kids)\n"
    )
    env = {**os.environ, **default_env("cpu"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}  # cold
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[] []", r.stdout


@pytest.mark.parametrize("device", ["cpu", "cuda:0", "cuda:3"])
def test_worker_env_limits_cpu_threads(device):
    """A GPU worker gets a few CPU threads (not one per host core); a CPU worker one."""
    from davinci_kernel.evaluate.pool import CPU_THREADS, default_env

    env = default_env(device)
    assert int(env["OMP_NUM_THREADS"]) == (1 if device == "cpu" else CPU_THREADS)
    assert env["TRITON_INTERPRET"] == ("1" if device == "cpu" else "0")
