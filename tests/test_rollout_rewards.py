"""The reward of each role: policy recipes on hand-made evaluation results, the selection
turns' scheme rewards, the summary reward, and ``fill_rewards`` over a task group."""

import pytest

from davinci_kernel.config import RewardConfig
from davinci_kernel.records import Completion, Episode, EvalResult, TaskGroup, Turn
from davinci_kernel.rollout.rewards import (
    fastp_reward,
    fill_rewards,
    policy_reward,
    released_reward,
    scheme_rewards,
    summary_reward,
    tiered_reward,
)


def ok(speedup, coverage=None):
    return EvalResult(compiled=True, correct=True, speedup=speedup, coverage=coverage,
                      timing_available=speedup is not None)


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
    assert policy_reward(ok(2.0), RewardConfig()) == released_reward(ok(2.0))
    assert policy_reward(ok(2.0), RewardConfig(kind="tiered")) == 0.8
    assert policy_reward(None, RewardConfig(kind="tiered")) == -0.5
    with pytest.raises(ValueError):
        policy_reward(ok(1.0), RewardConfig(kind="nope"))


def _turn(role, reward=None, scheme=0, result=None, turn=0):
    return Turn(role=role, task="t", scheme=scheme, turn=turn, reward=reward, result=result,
                completion=Completion(text="x"))


def test_scheme_rewards_mean_best_turn():
    g = TaskGroup(task="t", episodes=[
        Episode("t", 0, 0, turns=[_turn("policy", 1.0), _turn("policy", 2.0, turn=1)]),
        Episode("t", 0, 1, turns=[_turn("policy", 3.0), _turn("policy", 0.0, turn=1)]),
        Episode("t", 1, 0, turns=[_turn("policy", -0.5, scheme=1)]),
        Episode("t", 1, 1, turns=[]),  # no turn at all: best reward 0
    ])
    # scheme 0: best turns 2 and 3 → 2.5 ; scheme 1: −0.5 and 0 → −0.25
    assert scheme_rewards(g) == {0: 2.5, 1: -0.25}


def test_summary_reward_is_best_verified_speedup():
    assert summary_reward([1.3, 2.5, 1.8]) == 2.5
    assert summary_reward([]) == 0.0


def test_fill_rewards_policy_then_selection():
    cfg = RewardConfig(kind="tiered")
    kept = _turn("policy", 7.0, result=ok(3.0))  # a reward set by the rollout stays
    failed_gen = _turn("policy")  # no result: a no-code failure
    fast = _turn("policy", scheme=1, result=ok(2.0))
    g = TaskGroup(task="t", episodes=[Episode("t", 0, 0, turns=[kept, failed_gen]),
                                      Episode("t", 1, 0, turns=[fast])],
                  selections=[_turn("select", scheme=0), _turn("select", 9.0, scheme=1), _turn("select", scheme=2)],
                  summaries=[_turn("summary", 1.8)])
    fill_rewards(g, cfg)
    assert [kept.reward, failed_gen.reward, fast.reward] == [7.0, -0.5, 0.8]
    # selection turns always get their scheme's reward; a scheme without rollouts gets 0
    assert [t.reward for t in g.selections] == [7.0, 0.8, 0.0]
    assert g.summaries[0].reward == 1.8
