"""Speed of light (evaluate/harness/lightspeed.py): the floor by hand, the peak cache's
provenance, and the faster_than_light verdict on a recorded timing below the floor."""

import json
from pathlib import Path

import pytest

from davinci_kernel.config import EvalConfig
from davinci_kernel.evaluate.harness import judge, lightspeed
from davinci_kernel.records import EvalResult

FIXTURE = Path(__file__).parent / "fixtures" / "timing" / "faster_than_light.json"
PEAKS = {"copy_gbps": 2000.0, "matmul_tflops": {"float32": 50.0, "bfloat16": 800.0}, "l2_bytes": 50 << 20}


def test_floor_by_hand():
    # 1 GB in + 1 GB out at 2000 GB/s: 1 ms; 1.6 TFLOP of bf16 at 800 TFLOP/s: 2 ms (compute-bound)
    fl = lightspeed.floor(1e9, 1e9, {"bfloat16": 1.6e12}, PEAKS)
    assert fl["bytes_ms"] == pytest.approx(1.0) and fl["compute_ms"] == pytest.approx(2.0)
    assert fl["floor_ms"] == pytest.approx(2.0) and fl["bound"] == "compute"
    # the verdict counts the outputs beyond the L2 only
    assert fl["verdict_bytes"] == pytest.approx(2e9 - (50 << 20))
    # an unknown dtype counts at the fastest peak: the floor stays a floor
    assert lightspeed.floor(0, 0, {"unknown": 8e11}, PEAKS)["compute_ms"] == pytest.approx(1.0)
    assert lightspeed.peak_fraction(2.0, 4.0) == 0.5 and lightspeed.peak_fraction(None, 4.0) is None
    assert lightspeed.floor(1, 1, {}, {"copy_gbps": 0}) is None
    # below the floor by more than the margin; at the margin; a floor too small to judge
    assert lightspeed.faster_than_light(0.4, fl) and not lightspeed.faster_than_light(1.0, fl)
    tiny = lightspeed.floor(1e3, 1e3, {}, PEAKS)
    assert lightspeed.faster_than_light(1e-9, tiny) is None


def test_faster_than_light_rejects_a_recorded_timing_below_the_floor():
    """The recorded report (tests/fixtures/timing/faster_than_light.json) passes every other
    timing defence (judge.timing leaves it clean, as the code before this check judged it
    correct); the speed-of-light check rejects it."""
    d = json.loads(FIXTURE.read_text())
    res = EvalResult(task="t", trials=5, trials_passed=5, stage="timing", device="cuda:0")
    ref = {"refs": [], **d["reference"]}
    judge.timing(res, {"timing": d["timing"]}, {}, ref, "triton", ["k"], None, None, EvalConfig(device="cpu"))
    assert not res.flags and res.error_kind is None and res.speedup_ci == [7.4, 7.6]
    judge.light(res, ref, d["peaks"])
    assert res.error_kind == "faster_than_light" and "copy bandwidth" in res.error_msg
    assert res.peak_fraction > 1 and res.timing_detail["light"]["bound"] == "memory"
    # the same report with a time the bytes allow passes
    ok = EvalResult(task="t", trials=5, trials_passed=5, stage="timing")
    t = {**d["timing"], "cand": {**d["timing"]["cand"], "median": 0.05}}
    judge.timing(ok, {"timing": t}, {}, ref, "triton", ["k"], None, None, EvalConfig(device="cpu"))
    judge.light(ok, ref, d["peaks"])
    assert ok.error_kind is None and 0 < ok.peak_fraction < 1


def test_no_peaks_leaves_peak_fraction_null_with_a_reason():
    res = EvalResult(runtime_ms=1.0)
    judge.light(res, {"input_bytes": 10, "output_bytes": 10}, None)
    assert res.peak_fraction is None and any(w.startswith("peak_fraction: null") for w in res.warnings)


def test_peak_cache_from_another_driver_is_ignored_with_one_line(tmp_path):
    prov = {"gpu": "NVIDIA H100 80GB HBM3", "driver": "570.1", "torch": "2.11.0"}
    cache = lightspeed.PeakCache(str(tmp_path))
    cache.put({**PEAKS, "provenance": prov})
    assert cache.get(prov)["copy_gbps"] == 2000.0
    said = []
    assert cache.get({**prov, "driver": "580.2"}, say=said.append) is None
    assert len(said) == 1 and "driver 570.1" in said[0] and "measuring this card's peaks again" in said[0]
    assert cache.get({**prov, "gpu": "NVIDIA H200"}) is None  # another card: no entry
    (tmp_path / "peaks.json").write_text("{not json")
    assert cache.get(prov) is None  # a corrupt file is ignored (and rewritten by the next put)


def test_the_audit_counts_matrix_flops_by_dtype():
    import torch

    from davinci_kernel.evaluate.shared.audit import audited_call

    lin = torch.nn.Linear(64, 32)
    _, a = audited_call(torch, lambda x: torch.relu(lin(x)), [torch.randn(8, 64)])
    assert a["flops_by_dtype"] == {"float32": 2 * 8 * 64 * 32}  # the relu's elements are the byte term's


@pytest.mark.gpu
def test_peaks_are_measured_and_a_reference_solution_gets_an_interval_and_a_peak_fraction(gpu_evaluator):
    """On the GPU: the card's peaks are plausible (copy 0.5-6 TB/s, bf16 matmul above float32),
    and a correct reference solution's result has a finite interval around its speedup and a
    peak fraction below the card's peak."""
    from davinci_kernel.tasks import REFERENCE_DIR, load_task

    peaks = gpu_evaluator.trusted.peaks(gpu_evaluator.pool.slots[0])
    assert 500 < peaks["copy_gbps"] < 6000 and peaks["l2_bytes"] > 0
    assert peaks["matmul_tflops"]["bfloat16"] > peaks["matmul_tflops"]["float32"] > 1
    assert peaks["provenance"]["gpu"] and peaks["provenance"]["torch"]
    task = load_task("builtin:level1/3_Softmax")
    res = gpu_evaluator.evaluate(task, (REFERENCE_DIR / f"{task.name}.py").read_text(encoding="utf-8"))
    assert res.correct, res.error_msg
    lo, hi = res.speedup_ci
    assert lo <= res.speedup <= hi and hi / lo < 1.5
    assert 0 < res.peak_fraction < 1.2 and res.timing_detail["light"]["bound"] == "memory"


def test_float32_flops_count_at_the_tf32_peak_where_it_is_higher():
    # 1 TFLOP of float32: 20 ms at the plain float32 peak, 2 ms at TF32's (an honest TF32 kernel
    # must not read as several times the card's peak)
    peaks = {"copy_gbps": 2000.0, "matmul_tflops": {"float32": 50.0, "tf32": 500.0}}
    assert lightspeed.floor(0, 0, {"float32": 1e12}, peaks)["compute_ms"] == pytest.approx(2.0)
    slower = {"copy_gbps": 2000.0, "matmul_tflops": {"float32": 50.0, "tf32": 40.0}}  # never below float32's own
    assert lightspeed.floor(0, 0, {"float32": 1e12}, slower)["compute_ms"] == pytest.approx(20.0)
