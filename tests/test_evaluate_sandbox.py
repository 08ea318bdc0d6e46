"""Issue 16: candidates that attack the judge itself (classes 1-3, 6-9) are caught, and cannot
change another candidate's verdict or anything the harness stored.

Fixtures: ``tests/fixtures/cheats/sandbox_*.py`` (docstring lines ``task:``, ``expect:`` and
optionally ``also:``, other acceptable flags). Every evaluation runs in a throwaway harness
process (``sandbox_helpers.run_harness``): several fixtures SIGKILL processes, write the
harness's memory through /proc or overwrite its files, and must never do that to pytest.

``DVK_SANDBOX_PYTHONPATH=/path/to/old/checkout`` runs the same tests against another
checkout (e.g. a worktree of the code before the sandbox), where they are expected to fail.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

OTHER = os.environ.get("DVK_SANDBOX_PYTHONPATH")
if not OTHER:
    pytest.importorskip("davinci_kernel.evaluate.harness.isolation.sandbox")

from sandbox_helpers import (  # noqa: E402
    CHEATS,
    HONEST_RELU,
    ROOT_MARK,
    TASKS,
    caught,
    fixture_meta,
    harness_argv,
    harness_env,
    harness_spec,
    run_harness,
    write_zeros,
)

GPU_ONLY = {"sandbox_memo_timing"}
# Need state the test sets up (a server, stored files): their own tests below.
NEEDS_SETUP = {"sandbox_network_oracle", "sandbox_write_state", "sandbox_host_socket", "sandbox_sysv_ipc",
               "sandbox_keyring", "sandbox_stdout_flood", "sandbox_getpwuid"}
ALL = sorted(CHEATS.glob("sandbox_*.py"))
# numpy work is invisible to torch's dispatch audit and C++ profiler alike on CPU (on the GPU it
# pays for host round trips in its timing): a stated limit (docs/guarantees.md).
CPU_LIMITS: set = set()
CPU_FIXTURES = [pytest.param(p, marks=pytest.mark.xfail(strict=True, reason="numpy work is not seen on CPU"))
                if p.stem in CPU_LIMITS else p for p in ALL if p.stem not in GPU_ONLY | NEEDS_SETUP]


def _run(items, tmp, **kw):
    r = run_harness(items, tmp, pythonpath=OTHER, **kw)
    assert r["results"] is not None, f"harness process died (rc {r['rc']}): {r['stderr'][-2000:]}"
    return r["results"]


def _why(res):
    return (res["correct"], res["flags"], res["error_kind"], res["error_msg"][:300])


def _rounds(tmp, attackers: list, after: list, **kw) -> dict:
    """Each attacker in turn, followed by the candidates ``after`` (on the ReLU task), all on
    ONE evaluator (one harness process): stem -> (attacker's result, *the others').
    Whatever an attacker leaves behind meets every later round too."""
    relu, per = TASKS / "relu.py", 1 + len(after)
    items = []
    for path in attackers:
        items += [(TASKS / f"{fixture_meta(path)['task']}.py", path)] + [(relu, c) for c in after]
    got = _run(items, tmp, timeout=1800, **kw)
    return {path.stem: tuple(got[per * i:per * (i + 1)]) for i, path in enumerate(attackers)}


@pytest.fixture(scope="module")
def attack_rounds(tmp_path_factory):
    """Every CPU attacker on a single-worker evaluator, each followed by an honest Triton
    kernel and a zeros kernel: stem -> (attacker, honest, zeros)."""
    tmp = tmp_path_factory.mktemp("attacks")
    paths = [p.values[0] if hasattr(p, "values") else p for p in CPU_FIXTURES]
    return _rounds(tmp, paths, [HONEST_RELU, write_zeros(tmp)], workers=1)


@pytest.mark.parametrize("path", CPU_FIXTURES, ids=lambda p: p.stem)
def test_attacker_then_honest_and_zeros(attack_rounds, path):
    """On one single-worker evaluator: the attacker is caught, then an honest Triton kernel
    is correct and a zeros kernel is rejected (nothing the attacker left behind counts)."""
    meta = fixture_meta(path)
    att, honest, zero = attack_rounds[path.stem]
    assert caught(att, meta["accept"]), _why(att)
    assert honest["correct"] is True, _why(honest)
    assert zero["correct"] is False and zero["error_kind"] == "wrong_output", _why(zero)


SIBLING_ATTACKS = ["sandbox_kill_sibling", "sandbox_ref_overwrite", "sandbox_orphan_child", "sandbox_proc_mem"]


@pytest.fixture(scope="module")
def sibling_rounds(tmp_path_factory):
    """A two-worker evaluator; for each attacker in turn, the attacker and two honest kernels
    given at once: name -> (attacker, honest, honest)."""
    tmp = tmp_path_factory.mktemp("siblings")
    twin = tmp / "relu_triton_twin.py"  # another text of the same kernel: a batch judges one text once
    twin.write_text(HONEST_RELU.read_text() + "\n# the same kernel, another text\n")
    return _rounds(tmp, [CHEATS / f"{n}.py" for n in SIBLING_ATTACKS], [HONEST_RELU, twin], mode="many:3", workers=2)


@pytest.mark.parametrize("name", SIBLING_ATTACKS)
def test_two_workers_attacker_cannot_touch_sibling(sibling_rounds, name):
    """Two workers, evaluated side by side: the attacker cannot kill, overwrite or judge its
    sibling's honest candidate (nor, on the same evaluator, any later round's)."""
    meta = fixture_meta(CHEATS / f"{name}.py")
    att, honest, honest2 = sibling_rounds[name]
    assert caught(att, meta["accept"]), _why(att)
    assert honest["correct"] is True, _why(honest)
    assert honest2["correct"] is True, _why(honest2)


def _tree_bytes(paths):
    return {str(p): Path(p).read_bytes() for p in paths}


def test_persistent_state_is_out_of_reach(tmp_path):
    """skills.db, the baseline cache and a run's results.jsonl keep their bytes."""
    from davinci_kernel.records import Skill
    from davinci_kernel.skills.store import SkillStore

    cache = tmp_path / "cache"
    run_dir = tmp_path / "cwd" / "runs" / "r1"
    lib = tmp_path / "home" / ".cache" / "davinci_kernel" / "skills.db"
    for d in (cache, run_dir, lib.parent):
        d.mkdir(parents=True, exist_ok=True)
    store = SkillStore(lib)
    store.add(Skill(name="tile_softmax", description="one row per program", scope="general", tags=["softmax"],
                    content="## Motivation\nrows\n## Key Idea\none program per row\n## Example\nsee kernel"))
    names = store.names()
    store.close()
    (cache / "baselines.json").write_text(json.dumps({"abc|{}|H200|2.5|m": {"eager_ms": 1.0, "compile_ms": 0.5}}))
    (run_dir / "results.jsonl").write_text(json.dumps({"task": "relu", "correct": False, "speedup": None}) + "\n")
    files = [lib, cache / "baselines.json", run_dir / "results.jsonl"]
    before = _tree_bytes(files)

    path = CHEATS / "sandbox_write_state.py"
    meta = fixture_meta(path)
    (res,) = _run([(TASKS / f"{meta['task']}.py", path)], tmp_path, workers=1, cache_dir=cache)
    assert caught(res, meta["accept"]), _why(res)
    after = _tree_bytes(files)
    changed = [p for p in files if before[str(p)] != after[str(p)]]
    assert not changed, f"the candidate changed {changed}"
    assert not Path(str(lib) + "-wal").exists() or SkillStore(lib).names() == names


class _Oracle(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_POST(self):  # noqa: N802 - http.server's name
        import numpy as np

        type(self).hits += 1
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        out = np.maximum(np.frombuffer(data, dtype=np.float32), np.float32(0)).tobytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *a):
        pass


def test_network_is_blocked(tmp_path):
    """A localhost server that answers relu for any input: the candidate finds its port (env
    var and a world-readable file) but must not reach it."""
    import urllib.request

    _Oracle.hits = 0
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Oracle)
    port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    shared = Path(tempfile.mkdtemp(prefix="dvk-oracle-", dir="/tmp"))
    try:
        shared.chmod(0o755)
        (shared / "dvk_oracle_port").write_text(str(port))
        (shared / "dvk_oracle_port").chmod(0o644)
        with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/", data=b"\0" * 8)) as r:
            assert len(r.read()) == 8  # the oracle works from here
        _Oracle.hits = 0
        path = CHEATS / "sandbox_network_oracle.py"
        meta = fixture_meta(path)
        (res,) = _run([(TASKS / f"{meta['task']}.py", path)], tmp_path, workers=1,
                      env={"DVK_ORACLE_PORT": str(port)})
        assert caught(res, meta["accept"]), _why(res)
        assert _Oracle.hits == 0, f"the candidate reached the network ({_Oracle.hits} requests)"
    finally:
        srv.shutdown()
        shutil.rmtree(shared, ignore_errors=True)


def test_results_record_the_sandbox(tmp_path, request):
    """Each result says which sandbox mechanisms were in force (EvalResult.sandbox). The
    candidate is honest (it attacks nothing), so the session's CPU evaluator judges it; with
    DVK_SANDBOX_PYTHONPATH, a harness process of the other checkout does."""
    if OTHER:
        (res,) = _run([(TASKS / "relu.py", HONEST_RELU)], tmp_path, workers=1)
    else:
        from davinci_kernel.tasks import load_task_file

        r = request.getfixturevalue("cpu_evaluator").evaluate(load_task_file(TASKS / "relu.py"), HONEST_RELU.read_text())
        res = {"correct": r.correct, "flags": list(r.flags), "error_kind": r.error_kind,
               "error_msg": r.error_msg or "", "sandbox": r.sandbox}
    assert res["correct"] is True, _why(res)
    assert res["sandbox"], res


@pytest.mark.gpu
def test_memoized_timing_gains_nothing(tmp_path):
    """Class 9: a kernel that memoizes outputs on an input fingerprint is flagged, or at
    least times no faster than the same kernel without the memo."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    path = CHEATS / "sandbox_memo_timing.py"
    meta = fixture_meta(path)
    task = TASKS / f"{meta['task']}.py"
    honest = Path(__file__).parent / "fixtures" / "legit" / "matmul_relu_triton.py"
    memo, ref = _run([(task, path), (task, honest)], tmp_path, workers=1, device="cuda")
    assert ref["correct"] is True and ref["speedup"], _why(ref)
    if caught(memo, meta["accept"]):
        return
    assert memo["speedup"] is not None and memo["speedup"] <= 1.5 * ref["speedup"], (
        f"memoized {memo['speedup']}x vs honest {ref['speedup']}x", _why(memo))


# --------------------------------------------------------------------------- the worker's own world
def _fixture(name):
    path = CHEATS / f"{name}.py"
    meta = fixture_meta(path)
    return TASKS / f"{meta['task']}.py", path, meta


def test_sysv_ipc_does_not_outlive_the_worker(tmp_path):
    """A SysV segment and semaphore made by one evaluation: the next one (same harness) does
    not find them, and the host has none afterwards (an IPC namespace per worker)."""
    import ctypes
    import subprocess

    task, path, meta = _fixture("sandbox_sysv_ipc")
    libc = ctypes.CDLL(None, use_errno=True)
    key = 0x44564B31
    try:
        first, second = _run([(task, path), (task, path)], tmp_path, workers=1)
        assert caught(first, meta["accept"]), _why(first)
        assert caught(second, meta["accept"]), _why(second)
        assert libc.shmget(key, 0, 0) < 0 and libc.semget(key, 0, 0) < 0, "the segment outlived its worker"
    finally:
        subprocess.run(["ipcrm", "-M", str(key), "-S", str(key)], capture_output=True)


def test_keyring_does_not_carry_between_evaluations(tmp_path):
    """A key added to the user and session keyrings: neither the next evaluation of the same
    harness nor a later harness process (whose workers once got the same uids) finds it."""
    task, path, meta = _fixture("sandbox_keyring")
    a1, a2 = _run([(task, path), (task, path)], tmp_path / "a", workers=1)
    (b1,) = _run([(task, path)], tmp_path / "b", workers=1)
    for res in (a1, a2, b1):
        assert caught(res, meta["accept"]), _why(res)


def test_host_socket_files_are_out_of_reach(tmp_path):
    """A unix socket listening under the harness's /tmp answers relu; the candidate finds no
    socket file to connect to."""
    import socket
    import struct

    import numpy as np

    hits = []
    folder = Path(tempfile.mkdtemp(prefix="oracle-", dir="/tmp"))
    folder.chmod(0o755)
    sock_path = str(folder / "oracle.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    os.chmod(sock_path, 0o777)
    srv.listen(8)

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c:
                hits.append(1)
                n = struct.unpack(">Q", c.recv(8, socket.MSG_WAITALL))[0]
                data = c.recv(n, socket.MSG_WAITALL)
                c.sendall(np.maximum(np.frombuffer(data, dtype=np.float32), np.float32(0)).tobytes())

    threading.Thread(target=serve, daemon=True).start()
    try:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(sock_path)  # the oracle works from here
        probe.sendall(struct.pack(">Q", 4) + b"\0\0\0\0")
        assert len(probe.recv(4, socket.MSG_WAITALL)) == 4
        probe.close()
        hits.clear()
        task, path, meta = _fixture("sandbox_host_socket")
        (res,) = _run([(task, path)], tmp_path, workers=1)
        assert not hits, f"the candidate reached a host socket ({len(hits)} connections)"
        assert caught(res, meta["accept"]), _why(res)
    finally:
        srv.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_output_flood_and_passwd(tmp_path):
    """An honest candidate that calls getpwuid is correct; 1 GiB on stdout leaves the harness
    small (a bounded buffer), its verdict its own; an honest kernel after it is correct."""
    task, path, meta = _fixture("sandbox_stdout_flood")
    ptask, ppath, _pmeta = _fixture("sandbox_getpwuid")
    who, flood, honest = _run([(ptask, ppath), (task, path), (TASKS / "relu.py", HONEST_RELU)], tmp_path, workers=1)
    assert who["correct"] is True, _why(who)
    assert caught(flood, meta["accept"]), _why(flood)
    assert honest["correct"] is True, _why(honest)
    grown = flood["maxrss_kb"] - who["maxrss_kb"]
    assert grown < 256 << 10, f"the harness grew by {grown >> 10} MiB while a worker wrote 1 GiB"


def _dvk_entries_of(pids: set) -> list[str]:
    """``dvk-*`` folders in /tmp and /dev/shm whose owner file names one of ``pids``."""
    found = []
    for place in ("/tmp", "/dev/shm"):
        for p in Path(place).glob("dvk-*"):
            try:
                owner = (p / ".owner").read_text().split()[0]
            except (OSError, IndexError):
                continue
            if int(owner) in pids:
                found.append(str(p))
    return found


def _mounts_under(folder: str) -> list[str]:
    with open("/proc/self/mountinfo") as fh:
        return [ln.split()[4] for ln in fh if ln.split()[4].startswith(folder.rstrip("/") + "/")]


def test_nothing_left_after_close_or_a_killed_harness(tmp_path):
    """A harness killed (SIGKILL) while its worker runs leaves folders, mounts and a worker;
    the next harness removes them at start, and leaves nothing of its own when it closes."""
    import signal
    import subprocess
    import time

    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\ntime.sleep(600)\n")
    first = tmp_path / "first"
    first.mkdir()
    p = subprocess.Popen(harness_argv(harness_spec([(TASKS / "relu.py", sleeper)], first), first),
                         env=harness_env(first, OTHER), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = ""
        while not line.startswith(ROOT_MARK):
            line = p.stdout.readline()
            assert line, "the first harness ended early"
        info = json.loads(line[len(ROOT_MARK):])
        root, pid = info["root"], info["pid"]
        deadline = time.monotonic() + 120
        while not (os.path.isdir(root) and any(n.startswith("w-") for n in os.listdir(root))):
            assert time.monotonic() < deadline, "no worker started"
            time.sleep(0.5)
        time.sleep(5)  # the candidate's worker is asleep in its import
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert os.path.isdir(root)  # left behind by the killed harness
    (res,) = _run([(TASKS / "relu.py", HONEST_RELU)], tmp_path / "second", workers=1)
    assert res["correct"] is True, _why(res)
    assert not os.path.exists(root), f"{root} of the killed harness is still there"
    assert not _mounts_under(root), _mounts_under(root)
    cgroups = [c for c in Path("/sys/fs/cgroup").glob(f"**/dvk-{pid}-*") if c.is_dir()]
    assert not cgroups, cgroups
    left = _dvk_entries_of({pid, res.get("harness_pid", -1)})
    assert not left, left


# --------------------------------------------------------------------------- mechanisms, directly
needs_this_checkout = pytest.mark.skipif(bool(OTHER), reason="tests this checkout's sandbox modules")


@needs_this_checkout
def test_two_harness_processes_never_share_a_uid(monkeypatch):
    """Two processes taking worker uids from the same starting point (the worst case) get
    disjoint ones: each uid is held through a lock file while its worker lives."""
    import subprocess
    import sys

    from davinci_kernel.evaluate.harness.isolation import sandbox

    if sandbox.UidLease.lock_dir() is None:
        pytest.skip("no folder for uid locks")
    script = ("import random, sys\nfrom davinci_kernel.evaluate.harness.isolation import sandbox\nrandom.randrange = lambda n: 0\n"
              "held = [sandbox.UidLease.take() for _ in range(20)]\nprint(*[h.uid for h in held], flush=True)\n"
              "sys.stdin.read()\n")
    other = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    try:
        theirs = {int(u) for u in other.stdout.readline().split()}
        monkeypatch.setattr(sandbox.random, "randrange", lambda n: 0)
        mine = [sandbox.UidLease.take() for _ in range(20)]
        assert len(theirs) == 20 and not theirs & {m.uid for m in mine}
        assert len({m.uid for m in mine}) == 20
        for m in mine:
            m.release()
    finally:
        other.stdin.close()
        other.wait(timeout=30)
    again = sandbox.UidLease.take()  # the other process is gone: its uids are free again
    assert sandbox.UID_BASE <= again.uid < sandbox.UID_BASE + 40
    again.release()


@needs_this_checkout
def test_cpu_quota_bounds_a_whole_worker(cpu_evaluator):
    """A worker's cgroup has a CPU quota, and busy processes inside it (in sessions of their
    own, as the setsid fixture starts them) get no more CPU than it, together."""
    import subprocess
    import sys
    import time

    pool = cpu_evaluator.pool
    slot, w = pool.acquire()
    hogs = []
    try:
        if w.cgroup is None or w.cgroup.cpu_quota() is None:
            pytest.skip(f"no cgroup CPU quota here: {w.sandbox_desc}")
        quota, period = w.cgroup.cpu_quota()
        cores = quota / period
        assert cores <= max(1.0, (os.cpu_count() or 1) / len(pool))

        def join():
            os.setsid()
            for f in w.cgroup.procs_files():
                with open(f, "w") as fh:
                    fh.write("0")

        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=join) for _ in range(4)]
        t0 = time.monotonic()
        time.sleep(4)
        used = sum(_cpu_seconds(h.pid) for h in hogs)
        wall = time.monotonic() - t0
        assert used <= cores * wall * 1.25 + 0.5, f"{used:.2f} CPU s in {wall:.2f} s under a {cores}-core quota"
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        pool.release(slot, w)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@needs_this_checkout
def test_remove_tree_never_fails(tmp_path):
    """3000 nested folders, a file without permissions, a folder of mode 0: removed, no raise."""
    from davinci_kernel.evaluate.harness.isolation.sandbox import remove_tree

    top = tmp_path / "deep"
    top.mkdir()
    here = os.getcwd()
    try:
        os.chdir(top)
        for _ in range(3000):
            os.mkdir("d")
            os.chdir("d")
        Path("locked").write_text("x")
        os.chmod("locked", 0)
        os.chdir("..")
        os.chmod("d", 0)
    finally:
        os.chdir(here)
    remove_tree(str(top))
    assert not top.exists()
    remove_tree(str(top))  # gone already: nothing to do, no error


@needs_this_checkout
def test_output_tail_keeps_only_the_end():
    """A worker's output crosses a pipe into a buffer of the last 64 KiB, whatever its size."""
    import subprocess
    import sys

    from davinci_kernel.evaluate.harness.isolation.procs import OutputTail

    p = subprocess.Popen([sys.executable, "-c", "import os\nfor i in range(256): os.write(1, b'x' * (1 << 20))\n"
                          "print('the end')"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    tail = OutputTail(p.stdout)
    p.wait(timeout=120)
    tail.close()
    assert tail.total > 256 << 20
    text = tail.text()
    assert len(text) <= OutputTail.LIMIT and text.rstrip().endswith("the end")


@needs_this_checkout
def test_sandbox_description_names_every_mechanism():
    """``EvalResult.sandbox``: every mechanism in force by name, or one line of what is missing
    (which ``eval.sandbox=require`` refuses)."""
    from davinci_kernel.evaluate.harness.isolation import sandbox

    caps = sandbox.probe()
    text = caps.describe()
    if caps.missing:
        assert "; missing: " in text and text.count("\n") == 0
    else:
        assert text == "userns+ipcns+utsns+cgroupns+netns+pidns+mountns,uid,tmpfsroot,cgroup,rlimits", text
