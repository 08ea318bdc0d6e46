"""Timing over several shapes (suite/shapes.py, tasks/shapes.timing_sizes): the sizes drawn,
the scores by hand, a suite's figures, and a real CPU evaluation at one extra size."""

import random

import pytest

from davinci_kernel.records import EvalResult
from davinci_kernel.suite.shapes import ShapedEvaluator, scores, size_tasks, suite_shapes
from davinci_kernel.tasks import load_task
from davinci_kernel.tasks.shapes import int_constants, timing_sizes


def test_timing_sizes_are_drawn_distinct_and_no_larger_than_the_task():
    task = load_task("builtin:level1/4_LayerNorm")
    consts = int_constants(task.source)
    sizes = timing_sizes(task.source, 3, random.Random(5))
    assert len(sizes) == 3 and len({tuple(sorted(s.items())) for s in sizes}) == 3
    assert all(v <= consts[k] for s in sizes for k, v in s.items())
    assert sizes == timing_sizes(task.source, 3, random.Random(5))  # the same seed, the same sizes
    # the same sizes for every candidate and run of a task; named after them
    a, b = size_tasks(task, 2, small=False), size_tasks(task, 2, small=False)
    assert [t.name for _, t in a] == [t.name for _, t in b] and a[0][1].name.startswith(task.name + "@")
    assert "CPU_SHAPES" not in a[0][1].source


def _r(correct, speedup):
    return EvalResult(correct=correct, speedup=speedup)


def test_scores_by_hand():
    sh = scores(_r(True, 2.0), [({"n": 1}, _r(True, 0.5)), ({"n": 2}, _r(True, 4.0))], ps=(0.0, 1.0))
    assert sh["geomean"] == pytest.approx(4 ** (1 / 3))  # (2 x 0.5 x 4)^(1/3)
    assert sh["fast_0"] == 1.0 and sh["fast_1"] == pytest.approx(2 / 3)
    assert [r["sizes"] for r in sh["sizes"]] == ["task", {"n": 1}, {"n": 2}]
    wrong = scores(_r(True, 2.0), [({"n": 1}, _r(False, None))], ps=(0.0, 1.0))
    assert wrong["geomean"] is None and wrong["fast_0"] == 0.5 and wrong["fast_1"] == 0.5
    cpu = scores(_r(True, None), [({"n": 1}, _r(True, None))], ps=(0.0, 1.0))
    assert cpu["fast_0"] == 1.0 and cpu["fast_1"] is None and cpu["geomean"] is None
    rows = [{"timing_detail": {"shapes": sh}}, {"timing_detail": {"shapes": wrong}}, {"timing_detail": {}}]
    suite = suite_shapes(rows, ps=(0.0, 1.0))
    assert suite["tasks"] == 2 and suite["fast_0"] == pytest.approx(1.5 / 3)
    assert suite["geomean"] == pytest.approx(4 ** (1 / 3)) and suite_shapes([{"timing_detail": {}}]) is None


def test_a_cpu_evaluation_at_one_more_size(cpu_evaluator):
    task = load_task("builtin:level1/3_Softmax")
    src = open("davinci_kernel/tasks/reference/level1/3_Softmax.py", encoding="utf-8").read()
    res = ShapedEvaluator(cpu_evaluator, 1).evaluate(task, src)
    sh = res.timing_detail["shapes"]
    assert res.correct and len(sh["sizes"]) == 2 and sh["sizes"][1]["correct"], sh
    assert sh["fast_0"] == 1.0 and sh["fast_1"] is None  # no speed on a CPU
    d = res.to_dict()
    assert d["speedup_ci"] is None and d["peak_fraction"] is None  # both keys, null, and why:
    assert any(w.startswith("speedup_ci, peak_fraction: null on a CPU") for w in res.warnings)


def test_shapes_out_of_range_is_one_line_exit_2_before_anything_is_made(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "davinci_kernel.cli", "bench", "--shapes", "99", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.strip() == "error: --shapes 99: give 0 to 16 extra sizes"
    assert not out.exists()
