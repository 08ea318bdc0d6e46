"""Intervals in `dvk report`: the paired bootstrap of `dvk report A B` on two real CPU bench
runs (tests/fixtures/runs/cpu_bench_a|b: `dvk bench --device cpu` of three level-1 tasks,
run B with the reference solutions, run A with one of them) and on results files with
recorded GPU-like numbers; the one-run page's interval table and roofline chart."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from test_report_compare import dvk  # noqa: F401 - the fixture

from davinci_kernel.report.build import build_report

RUNS = Path(__file__).parent / "fixtures" / "runs"


def _copy(tmp_path, name):
    return shutil.copytree(RUNS / name, tmp_path / name)


def test_paired_bootstrap_on_two_real_cpu_runs(dvk, tmp_path):  # noqa: F811
    a, b = _copy(tmp_path, "cpu_bench_a"), _copy(tmp_path, "cpu_bench_b")
    code, out, _ = dvk("report", str(a), str(b), "--json", "--out", str(tmp_path / "cmp"))
    assert code == 0
    pd = json.loads(out)["paired"]["last"]["B-A"]
    assert pd["tasks"] == 3 and abs(pd["fast_0"]["diff"] - 2 / 3) < 1e-9
    assert pd["fast_0"]["significant"] is False  # 3 tasks: all-tied draws are too likely to call it
    assert pd["fast_1"] is None and pd["geomean"] is None  # a CPU run has no speedups
    code, out, _ = dvk("report", str(a), str(b), "--out", str(tmp_path / "cmp2"))
    assert "paired bootstrap over the 3 tasks" in out and "correct: +66.7 pp" in out and "not significant" in out
    assert "fast_1: n/a (not timed in both runs)" in out
    html = (tmp_path / "cmp2" / "compare.html").read_text(encoding="utf-8")
    assert 'class="paired"' in html and 'class="fastp-ci"' in html


def _gpu_like_run(path: Path, factor: float, seed: int) -> Path:
    """A bench run directory with recorded GPU-like numbers: 40 tasks, speedups around
    ``factor`` with their intervals and peak fractions."""
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True)
    base = np.exp(np.random.default_rng(0).normal(0, 0.05, 40))  # the tasks' own speed, shared by both runs
    rows = []
    for i in range(40):
        s = float(base[i] * factor * np.exp(rng.normal(0, 0.02)))
        rows.append({"task": f"level1/{i + 1}_T{i}", "level": 1, "correct": True, "compiled": True, "stage": "done",
                     "speedup": s, "speedup_ci": [s * 0.99, s * 1.01], "peak_fraction": 0.3 * s,
                     "runtime_ms": 1.0 / s, "ref_runtime_ms": 1.0, "device": "cuda:0", "timing_available": True,
                     "timing_detail": {"light": {"bound": "memory" if i % 3 else "compute"}}})
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "run.json").write_text(json.dumps({"kind": "bench", "suite": "builtin", "candidates": "reference",
                                               "totals": {"1": 40}}))
    return path


def test_paired_bootstrap_on_gpu_like_numbers_says_which_differences_hold(dvk, tmp_path):  # noqa: F811
    a = _gpu_like_run(tmp_path / "a", 1.0, 1)
    b = _gpu_like_run(tmp_path / "b", 1.3, 2)
    code, out, _ = dvk("report", str(a), str(b), "--json", "--out", str(tmp_path / "cmp"))
    assert code == 0
    pd = json.loads(out)["paired"]["last"]["B-A"]
    assert pd["fast_1"]["significant"] and pd["fast_1"]["diff"] > 0.3
    assert not pd["fast_2"]["significant"] and pd["fast_2"]["ci"] == [0.0, 0.0]  # nobody beats 2x
    assert pd["geomean"]["significant"] and 1.25 < pd["geomean"]["ratio"] < 1.35
    code, out, _ = dvk("report", str(a), str(a), "--json", "--out", str(tmp_path / "same"))
    assert code == 2  # a directory given twice is refused


def test_one_run_page_shows_intervals_and_the_roofline(tmp_path):
    run = _gpu_like_run(tmp_path / "run", 1.2, 3)
    html = build_report(run).read_text(encoding="utf-8")
    assert 'class="fastp-ci"' in html and "Roofline" in html and (run / "roofline.png").is_file()
    assert 'data-key="speedup_ci"' in html and 'data-key="peak_fraction"' in html
