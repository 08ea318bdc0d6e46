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
    pytest.importorskip("davinci_kernel.evaluate.sandbox")

from sandbox_helpers import CHEATS, HONEST_RELU, TASKS, caught, fixture_meta, run_harness, write_zeros  # noqa: E402

GPU_ONLY = {"sandbox_memo_timing"}
# Need state the test sets up (a server, stored files): their own tests below.
NEEDS_SETUP = {"sandbox_network_oracle", "sandbox_write_state"}
ALL = sorted(CHEATS.glob("sandbox_*.py"))
# numpy work is invisible to torch's dispatch audit and C++ profiler alike on CPU (on the GPU it
# pays for host round trips in its timing): a stated limit (README, "Not covered").
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
    return _rounds(tmp_path_factory.mktemp("siblings"), [CHEATS / f"{n}.py" for n in SIBLING_ATTACKS],
                   [HONEST_RELU, HONEST_RELU], mode="many:3", workers=2)


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
