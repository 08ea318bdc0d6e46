"""PRS probabilities, mismatch rejection and truncated importance sampling."""

import random

import pytest
import torch

from davinci_kernel.records import EvalResult, Turn
from davinci_kernel.rl.rejection import apply_prs, prs_keep_prob, segment_mismatch_keep, tis_weights


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


SEG = torch.tensor([0, 0, 1, 1, 1, 2, 2, 2])  # three samples of 2, 3 and 3 tokens
ALL = torch.ones(8, dtype=torch.bool)


def test_mismatch_rejection():
    # identical log-probs; every token 0.01 apart (geometric ratio e^0.01 ≈ 1.01, outside
    # [0.999, 1.001]); one token 0.0005 apart, averaged over 3 tokens: kept
    log_ratio = torch.tensor([0.0, 0.0, 0.01, 0.01, 0.01, 0.0005, 0.0, 0.0], dtype=torch.float64)
    assert segment_mismatch_keep(log_ratio, ALL, SEG, 3).tolist() == [True, False, True]
    low_token = torch.zeros(8, dtype=torch.float64)
    low_token[5] = -10.0  # one token with ratio e^-10 < 1e-4
    loose = segment_mismatch_keep(low_token, ALL, SEG, 3, low=0.0, high=float("inf"))
    assert loose.tolist() == [True, True, False]


def test_mismatch_ignores_tokens_without_rollout_logprobs():
    log_ratio = torch.tensor([0.0, 0.0005, 0.01, 0.01, -12.0, 0.3])
    valid = torch.tensor([True, True, True, True, True, False])
    seg = torch.tensor([0, 0, 1, 1, 2, 3])
    keep = segment_mismatch_keep(log_ratio, valid, seg, 4)
    assert keep.tolist() == [True, False, False, True]  # sample 3 has no rollout log-probs


def test_tis_weights_truncate():
    t = torch.log(torch.tensor([0.9, 0.1, 0.5]))
    r = torch.tensor([0.3, 0.2, float("nan")]).log()  # the last token has no rollout log-prob
    assert tis_weights(t, r, cap=2.0).tolist() == pytest.approx([2.0, 0.5, 1.0])
