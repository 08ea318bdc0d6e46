"""The interval code (davinci_kernel/intervals.py): hand-computed examples, and coverage by
simulation (synthetic timings with a known true ratio: how often the interval holds it)."""

import math

import numpy as np
import pytest

from davinci_kernel import intervals
from davinci_kernel.evaluate.shared.timing import ci_estimate, placement_mean


def test_speedup_ci_by_hand():
    # constant ratios: every resample gives the point, 2^1.5 = (3 x ln 2 + 1 x ln 8) / 4 pairs
    lo, hi = intervals.speedup_ci([[2.0, 2.0, 2.0], [8.0]])
    assert lo == pytest.approx(2 ** 1.5) and hi == pytest.approx(2 ** 1.5)
    assert placement_mean([2.0, 8.0], [3, 1]) == pytest.approx(2 ** 1.5)  # the evaluator's own statistic
    # one block of two pairs [1, 4]: a resample's median is 1 (p 1/4), sqrt(1 x 4) = 2 (p 1/2) or 4 (p 1/4);
    # the 2.5th and 97.5th percentiles of that are 1 and 4
    assert intervals.speedup_ci([[1.0, 4.0]], resamples=4000) == pytest.approx((1.0, 4.0))
    assert intervals.speedup_ci([[]]) is None and intervals.speedup_ci([[0.0, float("inf")]]) is None
    assert intervals.half_width([0.9, 1.1], 1.0) == pytest.approx(0.1)
    assert intervals.log_sd([math.exp(-1.96), math.exp(1.96)]) == pytest.approx(1.0, rel=1e-3)


def test_speedup_ci_covers_the_true_ratio_in_about_95_percent_of_simulated_evaluations():
    """200 simulated evaluations (4 placement blocks x 25 pairs, log-normal noise of 4 % on
    each side's time, true ratio 1.3): the 95 % interval must hold 1.3 in 91-99.5 % of them
    (the median's bootstrap is slightly conservative at small blocks)."""
    rng = np.random.default_rng(7)
    true, hits, n_sims = 1.3, 0, 200
    for i in range(n_sims):
        ref = 2.0 * np.exp(rng.normal(0, 0.04, (4, 25)))
        cand = (2.0 / true) * np.exp(rng.normal(0, 0.04, (4, 25)))
        lo, hi = intervals.speedup_ci((ref / cand).tolist(), resamples=400, seed=i)
        hits += lo <= true <= hi
    assert 0.91 <= hits / n_sims <= 0.995, hits / n_sims


def test_ci_estimate_tracks_the_bootstrap_half_width():
    rng = np.random.default_rng(3)
    ratios = (1.5 * np.exp(rng.normal(0, 0.05, 400))).tolist()
    blocks = [ratios[k:k + 100] for k in range(0, 400, 100)]
    boot = intervals.half_width(intervals.speedup_ci(blocks), placement_mean([float(np.median(b)) for b in blocks],
                                                                             [100] * 4))
    assert ci_estimate(ratios, 100) == pytest.approx(boot, rel=0.35)
    assert ci_estimate([2.0] * 10, 5) == 0.0 and ci_estimate([2.0], 5) == float("inf")


def test_suite_ci_by_hand_and_untimed():
    # every task solved and exact: Fast_1 is 1 in every resample, the geomean 2
    got = intervals.suite_ci([2.0, 2.0, 2.0], [True] * 3, ps=(0.0, 1.0))
    assert got == {"fast_0": [1.0, 1.0], "fast_1": [1.0, 1.0], "geomean": [pytest.approx(2.0), pytest.approx(2.0)]}
    # a missing task counts as unsolved: total 4 -> Fast_0 of a resample is k/4
    half = intervals.suite_ci([2.0, None], [True, True], ps=(0.0, 1.0), total=4)
    assert 0.0 <= half["fast_0"][0] < 0.5 < half["fast_0"][1] <= 1.0
    # correct but untimed (a CPU run): Fast_p>0 and the geomean have no interval, Fast_0 has one
    cpu = intervals.suite_ci([None, None], [True, False], ps=(0.0, 1.0))
    assert cpu["fast_1"] is None and cpu["geomean"] is None and cpu["fast_0"] is not None
    # a task whose own interval straddles p counts for Fast_p in part of the draws
    s = intervals.suite_ci([1.01], [True], ps=(1.0,), sds=[intervals.log_sd([0.95, 1.07])])
    assert s["fast_1"] == [0.0, 1.0]


def test_paired_diff_says_when_runs_differ():
    n = 40
    a = ([1.0] * n, [i < 10 for i in range(n)], [0.0] * n)  # A: 10 of 40 correct, all at 1.0x
    b = ([1.5] * n, [True] * n, [0.0] * n)  # B: all correct at 1.5x
    d = intervals.paired_diff(a, b, ps=(0.0, 1.0, 2.0))
    assert d["fast_0"]["diff"] == pytest.approx(0.75) and d["fast_0"]["significant"]
    assert d["fast_1"]["significant"] and not d["fast_2"]["significant"]  # nobody beats 2x
    assert d["geomean"]["ratio"] == pytest.approx(1.5) and d["geomean"]["significant"]
    same = intervals.paired_diff(a, a, ps=(0.0, 1.0))
    assert same["fast_0"] == {"diff": 0.0, "ci": [0.0, 0.0], "significant": False}
    with pytest.raises(ValueError):
        intervals.paired_diff(a, ([1.0], [True], [0.0]), ps=(0.0,))


def test_suite_geomean_interval_covers_the_true_geomean_in_about_95_percent_of_simulated_suites():
    """150 simulated suites of 40 tasks whose speedups are log-normal around a true geometric
    mean of 1.2 (sd 0.3 on the log scale): the bootstrap interval over tasks holds 1.2 in
    88-99 % of them (the percentile bootstrap runs a little narrow at n = 40)."""
    rng = np.random.default_rng(11)
    hits = 0
    for i in range(150):
        s = np.exp(np.log(1.2) + rng.normal(0, 0.3, 40)).tolist()
        lo, hi = intervals.suite_ci(s, [True] * 40, ps=(), resamples=400, seed=i)["geomean"]
        hits += lo <= 1.2 <= hi
    assert 0.88 <= hits / 150 <= 0.99, hits / 150
