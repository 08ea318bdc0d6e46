"""Reward recipes on hand-made evaluation results."""

import pytest

from davinci_kernel.config import RewardConfig
from davinci_kernel.records import EvalResult
from davinci_kernel.rl.rewards import fastp_reward, released_reward, reward, tiered_reward


def ok(speedup, coverage=None):
    return EvalResult(compiled=True, correct=True, speedup=speedup, coverage=coverage, timing_available=speedup is not None)


def test_released_recipe():
    assert released_reward(ok(2.0, 0.8)) == pytest.approx(0.5 + 1.0 + 0.4)
    assert released_reward(ok(10.0, 1.0)) == pytest.approx(0.5 + 3.0 + 0.5)  # capped at 6
    assert released_reward(EvalResult(compiled=True, correct=False, speedup=3.0)) == 0.0
    assert released_reward(EvalResult(compiled=False)) == 0.0
    # CPU mode: no timing, no coverage → 0.5 for correct
    assert released_reward(ok(None)) == 0.5
    assert released_reward(ok(float("nan"))) == 0.5


def test_tiered_table():
    assert [tiered_reward(ok(s)) for s in (3.0, 2.5, 1.5, 1.3, 1.0, 0.7)] == [1.0, 0.8, 0.6, 0.4, 0.2, -0.1]
    assert tiered_reward(EvalResult(compiled=False)) == -0.5
    assert tiered_reward(EvalResult(compiled=True, correct=False)) == -0.3
    assert tiered_reward(EvalResult(compiled=True, correct=False, flags=["decoy_kernel"])) == -1.0
    assert tiered_reward(ok(None)) == 0.2


def test_fastp_reward():
    assert fastp_reward(ok(1.3)) == pytest.approx(3 / 5)  # p = 0, 1, 1.2
    assert fastp_reward(ok(None)) == pytest.approx(1 / 5)
    assert fastp_reward(EvalResult(compiled=True, correct=False, speedup=4.0)) == 0.0


def test_dispatch_and_default():
    assert RewardConfig().kind == "released"
    assert reward(ok(2.0), RewardConfig()) == released_reward(ok(2.0))
    assert reward(ok(2.0), RewardConfig(kind="tiered")) == 0.8
    assert reward(None, RewardConfig(kind="tiered")) == -0.5
    with pytest.raises(ValueError):
        reward(ok(1.0), RewardConfig(kind="nope"))
