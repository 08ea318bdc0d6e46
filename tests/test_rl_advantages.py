"""Hand-computed cases for the advantage math and its assembly over a TaskGroup."""

from pathlib import Path

import pytest
import torch

from davinci_kernel.config import RewardConfig
from davinci_kernel.records import Completion, Episode, TaskGroup, Turn
from davinci_kernel.rl.advantages import (
    fill_advantages,
    leave_one_out,
    normalize_mean_abs,
    policy_advantages,
    trloo,
    turn_returns,
)
from davinci_kernel.rollout.rewards import fill_rewards

R = torch.tensor([[1.0, 2.0], [3.0, 0.0], [0.0, 9.0]])
ALIVE = torch.tensor([[True, True], [True, True], [True, False]])


def test_turn_returns_gamma_one():
    g = turn_returns(R, ALIVE, 1.0)
    assert g.tolist() == [[3.0, 2.0], [3.0, 0.0], [0.0, 0.0]]  # 9.0 is not alive: ignored


def test_turn_returns_discounted():
    g = turn_returns(R, ALIVE, 0.5)
    assert g.tolist() == [[2.0, 2.0], [3.0, 0.0], [0.0, 0.0]]


def test_trloo_hand_computed():
    a = trloo(turn_returns(R, ALIVE, 1.0), ALIVE)
    # turn 0: G = 3, 3, 0 → 3 − 1.5, 3 − 1.5, 0 − 3 ; turn 1: G = 2, 0 (two alive) → 2, −2
    assert a.tolist() == [[1.5, 2.0], [1.5, -2.0], [-3.0, 0.0]]


def test_trloo_equals_scaled_centering():
    g = torch.tensor([[1.0], [4.0], [7.0], [0.0]])
    alive = torch.ones(4, 1, dtype=torch.bool)
    n = 4
    expected = n / (n - 1) * (g - g.mean())
    assert torch.allclose(trloo(g, alive), expected)


def test_trloo_single_alive_gives_return():
    g = torch.tensor([[2.0, 5.0], [1.0, 0.0]])
    alive = torch.tensor([[True, True], [True, False]])
    a = trloo(g, alive)
    assert a[0, 1] == 5.0 and a[1, 1] == 0.0
    assert a[:, 0].tolist() == [1.0, -1.0]


def test_leave_one_out():
    assert leave_one_out(torch.tensor([1.0, 2.0, 3.0])).tolist() == [-1.5, 0.0, 1.5]
    assert leave_one_out(torch.tensor([5.0])).tolist() == [5.0]


def test_normalize_mean_abs():
    a = torch.tensor([[2.0, -4.0], [0.0, 6.0]])
    m = torch.tensor([[True, True], [False, True]])
    out = normalize_mean_abs(a, m)  # mean |A| over mask = 4
    assert out.tolist() == [[0.5, -1.0], [0.0, 1.5]]


def _turn(role, reward, scheme=0, rollout=0, turn=0, result=None):
    return Turn(role=role, task="t", scheme=scheme, rollout=rollout, turn=turn, reward=reward,
                result=result, completion=Completion(text="x"))


def _group():
    eps = [
        Episode("t", 0, 0, turns=[_turn("policy", 1.0), _turn("policy", 2.0, turn=1)]),
        Episode("t", 0, 1, turns=[_turn("policy", 3.0), _turn("policy", 0.0, turn=1)]),
        Episode("t", 1, 0, turns=[_turn("policy", 0.0)]),
        Episode("t", 1, 1, turns=[_turn("policy", 2.0)]),
    ]
    sels = [_turn("select", None, scheme=0), _turn("select", None, scheme=1)]
    return TaskGroup(task="t", selections=sels, episodes=eps)


def test_policy_group_by_task_and_scheme():
    g = _group()
    by_task = policy_advantages(g.episodes, 1.0, "task")
    # turn 0 returns: 3, 3, 0, 2 → A = G − mean(others): 3−5/3, 3−5/3, 0−8/3, 2−2
    assert by_task[0][0] == pytest.approx(3 - 5 / 3) and by_task[2][0] == pytest.approx(-8 / 3)
    assert by_task[3][0] == pytest.approx(0.0)
    # turn 1: only the two scheme-0 rollouts alive: returns 2, 0
    assert by_task[0][1] == pytest.approx(2.0) and by_task[1][1] == pytest.approx(-2.0)
    by_scheme = policy_advantages(g.episodes, 1.0, "scheme")
    assert by_scheme[0][0] == pytest.approx(0.0) and by_scheme[1][0] == pytest.approx(0.0)
    assert by_scheme[2][0] == pytest.approx(-2.0) and by_scheme[3][0] == pytest.approx(2.0)


def test_selector_advantages_from_scheme_rewards():
    g = fill_rewards(_group(), RewardConfig())
    # scheme rewards (rollout.rewards): scheme 0 → 2.5, scheme 1 → 1.0; LOO: ±1.5
    fill_advantages(g, selector_scale=0.3)
    assert g.selections[0].advantage == pytest.approx(0.3 * 1.5)
    assert g.selections[1].advantage == pytest.approx(-0.3 * 1.5)
    assert g.selections[0].reward == 2.5


def test_summarizer_advantages_from_their_rewards():
    g = fill_rewards(_group(), RewardConfig())
    g.summaries = [_turn("summary", 1.8, turn=0), _turn("summary", 0.0, turn=1), _turn("summary", 0.0, turn=2)]
    fill_advantages(g, summarizer_scale=0.5)
    assert [t.advantage for t in g.summaries] == pytest.approx([0.5 * 1.8, -0.5 * 0.9, -0.5 * 0.9])
    assert [t.reward for t in g.summaries] == [1.8, 0.0, 0.0]


def test_a_role_turn_without_reward_is_an_error():
    g = fill_rewards(_group(), RewardConfig())
    g.summaries = [_turn("summary", 1.0), _turn("summary", None, turn=1)]
    with pytest.raises(ValueError, match="1 summary turn"):
        fill_advantages(g)


def _tokens(g, lengths):
    """Completion token ids of ``lengths[i][t]`` tokens on episode i's turn t."""
    for ep, ls in zip(g.episodes, lengths):
        for turn, n in zip(ep.turns, ls):
            turn.completion = Completion(text="x", token_ids=list(range(n)))
    return g


LENGTHS = [[3, 1], [1, 1], [2], [2]]


def test_normalize_policy_only_token_weighted_across_schemes():
    g = _tokens(fill_rewards(_group(), RewardConfig()), LENGTHS)
    g.summaries = [_turn("summary", 1.8, turn=0), _turn("summary", 0.0, turn=1), _turn("summary", 0.0, turn=2)]
    fill_advantages(g, normalize=True, selector_scale=0.3, summarizer_scale=0.5)
    # TRLOO by task: turn 0: 4/3, 4/3, −8/3, 0; turn 1: 2, −2. Token-weighted mean |A|:
    # (3·4/3 + 1·2 + 1·4/3 + 1·2 + 2·8/3 + 2·0) / (3 + 1 + 1 + 1 + 2 + 2) = (44/3) / 10 = 22/15
    pol = [[t.advantage for t in e.turns] for e in g.episodes]
    assert pol == [pytest.approx([10 / 11, 15 / 11]), pytest.approx([10 / 11, -15 / 11]),
                   pytest.approx([-20 / 11]), pytest.approx([0.0])]
    # per token the mean |A| over the task is 1
    assert sum(abs(a) * n for e, ns in zip(pol, LENGTHS) for a, n in zip(e, ns)) / 10 == pytest.approx(1.0)
    # selection and summary advantages are not rescaled: LOO ±1.5 × 0.3; 1.8, −0.9, −0.9 × 0.5
    assert [t.advantage for t in g.selections] == pytest.approx([0.45, -0.45])
    assert [t.advantage for t in g.summaries] == pytest.approx([0.9, -0.45, -0.45])


def test_normalize_spans_the_schemes_with_group_by_scheme():
    g = _tokens(fill_rewards(_group(), RewardConfig()), LENGTHS)
    fill_advantages(g, group_by="scheme", normalize=True)
    # TRLOO per scheme: scheme 0 turn 0: 0, 0; turn 1: 2, −2; scheme 1: −2, 2. The mean |A| is
    # the task's, over both schemes: (1·2 + 1·2 + 2·2 + 2·2) / 10 = 1.2
    assert [[t.advantage for t in e.turns] for e in g.episodes] == [
        pytest.approx([0.0, 2 / 1.2]), pytest.approx([0.0, -2 / 1.2]), pytest.approx([-2 / 1.2]),
        pytest.approx([2 / 1.2])]


def test_normalize_without_token_ids_weighs_every_turn_alike():
    g = _tokens(fill_rewards(_group(), RewardConfig()), LENGTHS)
    g.episodes[3].turns[0].completion = Completion(text="x")  # a backend that gave text only
    fill_advantages(g, normalize=True)
    # mean |A| over the 6 turns: (4/3 + 2 + 4/3 + 2 + 8/3 + 0) / 6 = 14/9
    assert g.episodes[0].turns[0].advantage == pytest.approx(4 / 3 * 9 / 14)
    # equal rewards stay at zero rather than dividing by zero
    flat = _group()
    for e in flat.episodes:
        for t in e.turns:
            t.reward = 1.0
    flat.episodes = flat.episodes[2:]
    fill_advantages(fill_rewards(flat, RewardConfig()), normalize=True)
    assert [t.advantage for e in flat.episodes for t in e.turns] == [0.0, 0.0]


def test_normalize_adv_from_a_recipe_reaches_the_policy_alone(tmp_path):
    """rl.normalize_adv set in a recipe file reaches the trainer's preparation of a group; the
    shipped recipes and the defaults keep it off."""
    import random

    from davinci_kernel.config import help_table, load_config
    from davinci_kernel.rl.trainer import prepare_group

    root = Path(__file__).resolve().parents[1] / "configs"
    assert load_config(None, []).rl.normalize_adv is False
    assert all(load_config(root / f).rl.normalize_adv is False for f in ("qwen3-8b.yaml", "qwen3-14b.yaml"))
    assert "selection and summary advantages are not rescaled" in dict((k, h) for k, _, h in help_table())[
        "rl.normalize_adv"]
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text((root / "qwen3-8b.yaml").read_text().replace("normalize_adv: false", "normalize_adv: true"))
    cfg = load_config(recipe, ["rl.prs=false"])
    assert cfg.rl.normalize_adv is True

    def prepared(c):
        g = _tokens(_group(), LENGTHS)
        g.summaries = [_turn("summary", 1.8, turn=0), _turn("summary", 0.0, turn=1), _turn("summary", 0.3, turn=2)]
        prepare_group(g, c, random.Random(0))
        return g

    on, off = prepared(cfg), prepared(load_config(root / "qwen3-8b.yaml", ["rl.prs=false"]))
    assert on.episodes[0].turns[0].advantage == pytest.approx(10 / 11)
    assert off.episodes[0].turns[0].advantage == pytest.approx(4 / 3)
    assert [t.advantage for t in on.selections + on.summaries] == [t.advantage for t in off.selections + off.summaries]


@pytest.mark.usefixtures("one_torch_thread")
def test_normalize_adv_in_a_trainer_step(tmp_path):
    """A tiny model on the synthetic environment, with normalize_adv: the trained policy tokens
    have a mean |A| of 1 (every task's is 1); the selection and summary agents' stay unscaled
    (``test_normalize_adv_from_a_recipe_reaches_the_policy_alone``)."""
    from davinci_kernel.config import load_config
    from davinci_kernel.rl.synthetic import SyntheticEnv
    from davinci_kernel.rl.trainer import RLTrainer

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "tiny-cpu.yaml",
                      ["rl.steps=1", "rl.eval_every=0", "rl.save_every=1000", "rl.normalize_adv=true",
                       "rl.mismatch='off'"])
    m = RLTrainer(cfg, out=tmp_path, env=SyntheticEnv(cfg, policy_gain=6.0)).step(1)
    assert m["adv_abs/policy"] == pytest.approx(1.0)  # no policy turn here has A = 0 or is dropped by PRS
    assert m["adv_abs/select"] != pytest.approx(0.3)  # the old per-role normalisation made it exactly 0.3
