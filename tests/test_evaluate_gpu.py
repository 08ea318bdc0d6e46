"""GPU-only evaluator tests (run with `pytest -m gpu` on a CUDA machine)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES, fixture_task

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name,task", [("relu_triton", "relu"), ("matmul_relu_triton", "matmul_relu"),
                                       ("relu_cuda", "relu")])
def test_legit_kernels_time_on_gpu(gpu_evaluator, name, task):
    res = gpu_evaluator.evaluate(fixture_task(task), (FIXTURES / "legit" / f"{name}.py").read_text())
    assert res.correct, (res.error_kind, res.error_msg, res.flags)
    assert res.timing_available and res.speedup and res.speedup > 0
    assert res.coverage is not None and res.coverage > 0.5
    # the profiler's view agrees with the timed window: one stream, no more kernel time than was timed
    assert res.timing_detail["profiled_streams"] == 1, res.timing_detail
    assert res.timing_detail["flush"]["kind"] == "hold" and res.timing_detail["flush"]["fills_sms"], res.timing_detail
    assert res.timing_detail["lead_us"] > 0  # the automatic lead, sized in warm-up
    assert all(c and 300 < c < 3000 for c in res.timing_detail["clock_mhz"]), res.timing_detail
    assert res.kernels and any(k.custom for k in res.kernels)


def test_illegal_memory_access_then_a_correct_kernel(gpu_evaluator):
    res = gpu_evaluator.evaluate(fixture_task("relu"), (FIXTURES / "legit" / "illegal_access_cuda.py").read_text())
    assert not res.correct and res.error_kind == "cuda_error", (res.error_kind, res.error_msg)
    again = gpu_evaluator.evaluate(fixture_task("relu"), (FIXTURES / "legit" / "relu_triton.py").read_text())
    assert again.correct, again.error_msg


def test_two_workers_per_gpu_time_alone(tmp_path):
    """Two workers on one GPU: candidates are checked side by side, but while one is timed
    (or a baseline is), every other process of ours that is checking is stopped, no two
    timings overlap, and the speedups still come out."""
    import contextlib
    import time

    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator
    from davinci_kernel.evaluate.harness.gate import DeviceGate, Gates
    from davinci_kernel.evaluate.harness.isolation.procs import _state

    spans, running_beside = [], []

    class Recording(DeviceGate):
        @contextlib.contextmanager
        def exclusive(self, then_share=None):
            with super().exclusive(then_share=then_share):
                t0 = time.monotonic()
                for h in list(self._holders):  # each checking worker: its cgroup frozen or every pid stopped
                    if not h.is_stopped():
                        running_beside.extend(pid for pid in h.tree() if _state(pid) not in ("T", "t", "Z", "X", None))
                yield
                spans.append((t0, time.monotonic()))

    class RecordingGates(Gates):
        def __call__(self, device):
            with self._lock:
                return self._gates.setdefault(device or "cpu", Recording())

    relu = (FIXTURES / "legit" / "relu_triton.py").read_text()
    mm = (FIXTURES / "legit" / "matmul_relu_triton.py").read_text()
    cfg = EvalConfig(device="cuda", cache_dir=str(tmp_path / "cache"), baseline_compile=False, workers_per_gpu=2)
    with Evaluator(cfg) as ev:
        assert ev.n_workers == 2
        ev._gates = ev.pool.gates = ev.trusted.gates = RecordingGates()
        again = "\n# another text of the same kernel (a batch judges one text once)\n"
        res = ev.evaluate_many([(fixture_task("relu"), relu), (fixture_task("matmul_relu"), mm),
                                (fixture_task("relu"), relu + again), (fixture_task("matmul_relu"), mm + again)])
    assert all(r.correct and r.speedup for r in res), [(r.error_kind, r.error_msg, r.flags) for r in res]
    assert len(spans) >= 4  # 4 timings (+ baselines)
    assert not running_beside, "a checking process ran while another was timed"
    for a, b in spans:
        assert not [s for s in spans if s != (a, b) and s[0] < b and s[1] > a], "two timings overlapped"


def _relu_of(tmp_path, share: float):
    """The ReLU fixture task sized so that one call's inputs plus outputs take ``share`` of
    the GPU's memory (float32), and an honest Triton ReLU with 64-bit offsets for it."""
    import torch

    from davinci_kernel.tasks import load_task_file

    total = torch.cuda.mem_get_info()[1]
    cols = 1 << 17
    rows = int(share * total / 2 / 4 / cols)
    src = (FIXTURES / "tasks" / "relu.py").read_text()
    src = src.replace("batch_size = 2048", f"batch_size = {rows}").replace("dim = 8192", f"dim = {cols}")
    path = tmp_path / f"relu_{int(share * 100)}pct.py"
    path.write_text(src)
    cand = (FIXTURES / "legit" / "relu_triton.py").read_text()
    cand = cand.replace("pid = tl.program_id(0)", "pid = tl.program_id(0).to(tl.int64)")
    return load_task_file(path), cand, rows * cols * 4 * 2


def test_two_large_tasks_on_one_gpu_are_admitted_one_at_a_time(tmp_path):
    """Two workers on one GPU, two evaluations of a task whose inputs plus outputs are 13 %
    of its memory: each may reach 4 x that, so both together would not fit. The harness
    admits them one after the other (admission.py) and both are judged and timed; before
    admission, four workers on KernelBench level 1 ran out of memory on 44 problems."""
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    task, cand, io = _relu_of(tmp_path, 0.13)
    cfg = EvalConfig(device="cuda", cache_dir=str(tmp_path / "cache"), baseline_compile=False, workers_per_gpu=2)
    with Evaluator(cfg) as ev:
        res = ev.evaluate_many([(task, cand), (task, cand + "\n# another text (a batch judges one text once)\n")])
        ledger = ev.memory("cuda:0")
    print("two large tasks:", [r.phase_seconds for r in res], ledger.capacity, io)
    assert all(r.correct and r.speedup for r in res), [(r.error_kind, r.error_msg, r.flags) for r in res]
    assert ledger.most_holders == 1 and ledger.capacity < 2 * (4 * io)


def test_a_task_of_15_percent_of_gpu_memory_fits_the_plan(tmp_path):
    """Inputs plus outputs of one call are 15 % of the GPU's memory (a ReLU): the task is
    judged and timed, and the worker's measured peak stays within 4 x (inputs + outputs) +
    the flush buffer + a fixed context allowance (the bound in docs/guarantees.md)."""

    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    task, cand, io = _relu_of(tmp_path, 0.15)
    cfg = EvalConfig(device="cuda", cache_dir=str(tmp_path / "cache"), baseline_compile=False)
    with Evaluator(cfg, workers=1) as ev:
        res = ev.evaluate(task, cand)
    assert res.correct and res.speedup, (res.error_kind, res.error_msg, res.flags)
    plan = res.timing_detail["plan"]
    assert plan["sets"] >= 1 and plan["fits"]
    print("15% task:", res.phase_seconds, plan)
    # the bound: 4 x (inputs + outputs) + the small-task allowance + flush buffer + the context's own
    assert plan["measured_peak_bytes"] <= 4 * io + (1 << 30) + (256 << 20) + (2 << 30), (plan, io, res.phase_seconds)
