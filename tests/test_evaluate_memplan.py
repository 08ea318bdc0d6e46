"""The memory plan: sizes in, plan out (pure arithmetic), and the reference's size check."""

from __future__ import annotations

import pytest

from davinci_kernel.evaluate.shared import memplan

G = memplan.GiB


@pytest.mark.parametrize("i_gb,o_gb,budget_gb,max_sets,placements,want_sets,want_place", [
    (0.1, 0.1, 100, 5, 4, 5, 4),      # small task: every trial set, fresh placements
    (6.4, 6.4, 130, 5, 4, 2, 1),      # ReLU 4096 x 393216 alone on an H200: the 4 x (I + O) bound
    (6.4, 6.4, 60, 5, 4, 2, 1),       # beside other workers: more sets rather than fresh copies
    (6.4, 6.4, 40, 5, 4, 1, 4),       # one set either way: fresh copies
    (17.2, 0.5, 100, 5, 4, 3, 1),     # the largest level-1 input
    (17.2, 0.5, 40, 5, 4, 1, 1),      # one set, KernelBench's own minimum
    (1.0, 1.0, 5.5, 5, 4, 1, 1),      # exactly one set: 2I + 3O + flush
])
def test_plan_takes_the_most_sets_that_fit(i_gb, o_gb, budget_gb, max_sets, placements, want_sets, want_place):
    i, o, budget, flush = int(i_gb * G), int(o_gb * G), int(budget_gb * G), 256 << 20
    p = memplan.plan_timing(i, o, budget, flush, max_sets, placements)
    assert (p.sets, p.placements) == (want_sets, want_place)
    assert p.fits and p.peak_bytes <= budget
    assert p.peak_bytes == memplan.timing_peak(i, o, p.sets, p.placements) + flush
    assert p.peak_bytes - flush <= memplan.bound(i, o)
    if p.sets < max_sets:  # one more set would not have fit, with or without fresh copies
        more = memplan.timing_peak(i, o, p.sets + 1, 1)
        assert more + flush > budget or more > memplan.bound(i, o)


@pytest.mark.parametrize("i,o", [(1, 1), (3 << 30, 1), (1, 3 << 30), (7 << 30, 5 << 30), (40 << 30, 40 << 30),
                                 (123456789, 987654321)])
def test_plan_stays_within_four_times_one_call_whatever_is_free(i, o):
    """However much memory is free (a 1 TB device here), a task's planned data stays within
    4 x (inputs + outputs of one call) + the fixed small-task allowance."""
    p = memplan.plan_timing(i, o, 1 << 40, 256 << 20, 5, 4)
    assert p.fits and p.peak_bytes - (256 << 20) <= 4 * (i + o) + memplan.SMALL_TASK_BYTES


def test_plan_never_below_one_set_and_says_when_it_does_not_fit():
    p = memplan.plan_timing(10 * G, 10 * G, 5 * G, 256 << 20, 5, 4)
    assert p.sets == 1 and p.placements == 1 and not p.fits


@pytest.mark.parametrize("i,o", [(1, 1), (7, 3), (1000, 0), (0, 1000)])
def test_bounds(i, o):
    """One set: timing holds 2I + 3O; correctness 2I + O; both within 4 x (I + O)."""
    assert memplan.timing_peak(i, o, 1, 1) == 2 * i + 3 * o <= 4 * (i + o)
    assert memplan.check_peak(i, o) == 2 * i + o
    assert memplan.least_need(i, o) == 2 * i + o  # no parameters: one trial is the least a worker needs


def test_tensor_bytes_nested():
    import torch

    xs = [torch.zeros(3, 4), (torch.zeros(2, dtype=torch.float16), 5), {"a": torch.zeros(1, dtype=torch.int64)}]
    assert memplan.tensor_bytes(torch, xs) == 48 + 4 + 8


def test_a_task_too_large_for_the_host_is_one_line(tmp_path, cpu_evaluator):
    """A problem whose one trial exceeds the host's memory is refused by the reference
    process from a meta-device pass, before anything is allocated: a result, not a kill
    (on the session's evaluator, which the later tests go on using)."""
    from davinci_kernel.tasks import load_task_file

    src = tmp_path / "huge.py"
    src.write_text(
        "import torch\nimport torch.nn as nn\n\nN = 1 << 40\n\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return x * 2\n\n\n"
        "def get_inputs():\n    return [torch.randn(N)]\n\n\ndef get_init_inputs():\n    return []\n")
    cand = "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
    res = cpu_evaluator.evaluate(load_task_file(src), cand)
    assert not res.correct and res.stage == "reference" and res.error_kind == "too_large", (res.error_kind, res.error_msg)
    assert "GiB" in res.error_msg and "\n" not in res.error_msg
