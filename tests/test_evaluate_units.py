"""Pure helpers of the evaluator: timing iteration count and the shape re-check's sizes."""

from __future__ import annotations

import pytest

from davinci_kernel.evaluate.timing import n_iters
from davinci_kernel.tasks.shapes import perturbations


@pytest.mark.parametrize("per_iter_ms,expect", [(100.0, 50), (1.0, 500), (0.1, 1000), (0.0, 1000), (20.0, 50)])
def test_n_iters_fills_the_budget_within_bounds(per_iter_ms, expect):
    assert n_iters(per_iter_ms, iters=50, max_iters=1000, budget_s=0.5) == expect


SRC = '''
batch_size = 5
dim = 300
num_heads = 4
PERTURB = ["batch_size", "dim"]
'''


def test_shape_recheck_tries_larger_sizes_first():
    variants = perturbations(SRC)
    first = variants[0]
    assert set(first) == {"batch_size", "dim"}
    assert first["batch_size"] > 5 and first["dim"] > 300  # a baked-in bound leaves elements unwritten
    assert first["dim"] % 2 == 1  # odd: power-of-two and divisibility assumptions break
    assert variants[-1]["batch_size"] < 5 and variants[-1]["dim"] < 300  # fallback when the reference rejects
