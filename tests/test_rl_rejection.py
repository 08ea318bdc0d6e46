"""PRS probabilities, mismatch rejection and truncated importance sampling."""

import math
import random

import pytest
import torch

from davinci_kernel.records import EvalResult, Turn
from davinci_kernel.rl.rejection import apply_prs, mismatch_keep, mismatch_stats, prs_keep_prob, tis_weights


def test_prs_probabilities():
    assert prs_keep_prob(True, 0.25) == 0.0
    assert prs_keep_prob(True, 0.35) == pytest.approx(0.5)
    assert prs_keep_prob(True, 0.9) == 1.0
    assert prs_keep_prob(False, 0.0) == 1.0
    assert prs_keep_prob(True, None) == 1.0


def test_apply_prs_drops_only_low_coverage_correct():
    turns = [Turn(role="policy", task="t", result=EvalResult(correct=True, coverage=0.1)),
             Turn(role="policy", task="t", result=EvalResult(correct=False, coverage=0.0)),
             Turn(role="policy", task="t", result=EvalResult(correct=True, coverage=0.95))]
    assert apply_prs(turns, random.Random(0)) == 1
    assert [t.kept for t in turns] == [False, True, True]
    half = [Turn(role="policy", task="t", result=EvalResult(correct=True, coverage=0.35)) for _ in range(2000)]
    dropped = apply_prs(half, random.Random(1))
    assert 900 < dropped < 1100


def test_mismatch_rejection():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 1]], dtype=torch.bool)
    rollout = torch.log(torch.full((3, 3), 0.5))
    trainer = rollout.clone()
    trainer[1] += 0.01  # geometric ratio e^0.01 ≈ 1.01: outside [0.999, 1.001]
    trainer[2, 0] += 0.0005  # tiny drift averaged over 3 tokens: kept
    trainer[0, 2] += 5.0  # masked position: ignored
    geo, min_ratio = mismatch_stats(trainer, rollout, mask)
    assert geo[1] == pytest.approx(math.exp(0.01))
    assert mismatch_keep(trainer, rollout, mask).tolist() == [True, False, True]
    low_token = rollout.clone()
    low_token[2, 0] -= 10.0  # one token with ratio e^-10 < 1e-4
    loose = mismatch_keep(low_token, rollout, mask, low=0.0, high=float("inf"))
    assert loose.tolist() == [True, True, False]
    assert min_ratio[2] == pytest.approx(1.0)


def test_tis_weights_truncate():
    mask = torch.tensor([[1, 1, 0]], dtype=torch.bool)
    t = torch.log(torch.tensor([[0.9, 0.1, 0.5]]))
    r = torch.log(torch.tensor([[0.3, 0.2, 0.5]]))
    w = tis_weights(t, r, mask, cap=2.0)
    assert w[0].tolist() == pytest.approx([2.0, 0.5, 0.0])


def test_segment_mismatch_matches_padded_form():
    from davinci_kernel.rl.rejection import segment_mismatch_keep

    log_ratio = torch.tensor([0.0, 0.0005, 0.01, 0.01, -12.0, 0.3])
    valid = torch.tensor([True, True, True, True, True, False])
    seg = torch.tensor([0, 0, 1, 1, 2, 3])
    keep = segment_mismatch_keep(log_ratio, valid, seg, 4)
    assert keep.tolist() == [True, False, False, True]  # sample 3 has no rollout log-probs
