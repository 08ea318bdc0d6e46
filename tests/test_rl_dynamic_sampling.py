"""Dynamic sampling (rl.dynamic_sampling), as the release does it: tasks oversampled up front
(rl.dynamic_oversample), task groups with no reward variance rejected, the batch filled from the
survivors; the fallback rounds up to rl.dynamic_max_factor. Checked on hand-computed reward
spreads, the refill arithmetic, the collection loop with a stand-in environment, the seeded
extra tasks, the config, and a trainer step of a tiny model on the synthetic environment."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from davinci_kernel.config import ConfigError, help_table, load_config
from davinci_kernel.records import Completion, Episode, EvalResult, Stage, Task, TaskGroup, Turn
from davinci_kernel.rl.data import TaskSampler
from davinci_kernel.rl.dynamic import (
    STD_EPS,
    collect_step,
    low_variance,
    oversample_count,
    refill_count,
    reward_std,
    rollout_returns,
)
from davinci_kernel.rl.trainer import prepare_group

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _result(speedup: float, correct: bool = True) -> EvalResult:
    return EvalResult(task="t", level=1, compiled=True, correct=correct, stage=Stage.DONE, speedup=speedup,
                      coverage=1.0, timing_available=True)


def _group(name: str, speedups: list[list[float]], select: bool = False) -> TaskGroup:
    """One task: scheme i's rollouts reach ``speedups[i]`` (one turn each); with ``select``, a
    selection turn per scheme but the last (the null scheme)."""
    def turn(role, **kw):
        return Turn(role=role, task=name, messages=[{"role": "user", "content": "x"}],
                    completion=Completion(text="y"), **kw)

    eps = [Episode(name, si, r, turns=[turn("policy", scheme=si, rollout=r, result=_result(s))])
           for si, row in enumerate(speedups) for r, s in enumerate(row)]
    sels = [turn("select", scheme=si, turn=si) for si in range(len(speedups) - 1)] if select else []
    return TaskGroup(task=name, schemes=[[] for _ in speedups], selections=sels, episodes=eps)


def _prepared(g: TaskGroup, *overrides: str) -> TaskGroup:
    prepare_group(g, load_config(None, ["rl.prs=false", *overrides]), random.Random(0))
    return g


def test_reward_std_hand_computed():
    # returns 1, 3 → mean 2, population std 1; one rollout or none: 0
    assert reward_std(torch.tensor([1.0, 3.0])) == pytest.approx(1.0)
    assert reward_std(torch.tensor([0.5, 0.5, 2.0, 1.0])) == pytest.approx(0.61237244)  # sqrt(0.375)
    assert reward_std(torch.tensor([4.0])) == 0.0 and reward_std(torch.zeros(0)) == 0.0
    # float residue: 0.1 + 0.2 against 0.3 differ by ~5.6e-17, far below the threshold
    assert 0 < reward_std(torch.tensor([0.1 + 0.2, 0.3], dtype=torch.float64)) <= STD_EPS == 1e-6


def _rewarded(name, rewards):
    """A task group whose rollout i has the turn rewards ``rewards[i]`` (all in scheme 0)."""
    eps = [Episode(name, 0, i, turns=[Turn(role="policy", task=name, scheme=0, rollout=i, turn=t, reward=r)
                                      for t, r in enumerate(rs)]) for i, rs in enumerate(rewards)]
    return TaskGroup(task=name, schemes=[[]], episodes=eps)


def test_a_group_without_reward_variance_is_low_variance():
    # every rollout failed; all reached the same reward; the same returns by different turns
    assert low_variance(_rewarded("fail", [[0.0, 0.0], [0.0], [0.0, 0.0, 0.0]]))
    assert low_variance(_rewarded("same", [[1.3], [1.3], [1.3]]))
    assert low_variance(_rewarded("sums", [[0.5, 1.0], [1.5]]))  # returns 1.5 and 1.5
    g = _rewarded("live", [[0.5, 1.0], [1.5], [0.0]])  # returns 1.5, 1.5, 0
    assert rollout_returns(g).tolist() == [1.5, 1.5, 0.0] and not low_variance(g)
    # across schemes: equal within each scheme, different between them → variance (the task's)
    assert not low_variance(_prepared(_group("s", [[1.0, 1.0], [2.0, 2.0]]), "rl.group_by=scheme"))
    assert low_variance(_prepared(_group("flat", [[1.3, 1.3], [1.3, 1.3]])))


def test_oversample_count():
    assert [oversample_count(4, f) for f in (1.0, 1.5, 2.0, 2.2)] == [0, 2, 4, 5]


@pytest.mark.parametrize("missing,kept,sampled,budget,want", [
    (0, 4, 4, 8, 0),  # the batch is full
    (2, 2, 4, 8, 4),  # half kept so far: twice the places
    (1, 3, 4, 8, 2),  # ceil(1 / 0.75)
    (3, 1, 4, 2, 2),  # the bound
    (4, 0, 4, 8, 8),  # none kept yet: the rest of the budget
    (2, 2, 4, 0, 0),  # the bound is reached
])
def test_refill_count(missing, kept, sampled, budget, want):
    assert refill_count(missing, kept, sampled, budget) == want


class _Stand:
    """A stand-in environment: tasks named flat* give groups with equal rewards, live* do not;
    each collection stages one skill per task; further tasks come in the order flat0, live0,
    flat1, live1, ... (``only_live``: live ones alone), those already sampled left out."""

    def __init__(self, only_live: bool = False):
        self.only_live = only_live
        self.calls: list[list[str]] = []
        self._staged: list[str] = []
        self.extra_calls: list[tuple[int, int, set]] = []
        self.pool = [Task(name=f"{kind}{i}", level=1, problem_id=i, source="")
                     for i in range(20) for kind in ("flat", "live")]

    def collect(self, tasks):
        self.calls.append([t.name for t in tasks])
        self._staged = [f"skill-of-{t.name}" for t in tasks]
        return [_group(t.name, [[1.0, 1.0]] if t.name.startswith("flat") else [[1.0, 2.0]]) for t in tasks]

    def staged(self):
        return list(self._staged)

    def extra(self, round_, n, seen):
        self.extra_calls.append((round_, n, set(seen)))
        fresh = [t for t in self.pool if t.name not in seen and not (self.only_live and t.name.startswith("flat"))]
        return fresh[:n]


def _run(names, dynamic, factor=0.0, only_live=False, oversample=2.0):
    env = _Stand(only_live)
    tasks = [Task(name=n, level=1, problem_id=0, source="") for n in names]
    prep = load_config(None, ["rl.prs=false"])
    got = collect_step(tasks, env.collect, lambda g: prepare_group(g, prep, random.Random(0)), env.staged,
                       env.extra, dynamic=dynamic, oversample=oversample, max_factor=factor)
    return env, got


def test_off_every_group_is_kept_and_counted():
    env, got = _run(["flat0", "live0", "flat1", "live1"], dynamic=False)
    assert [g.task for g in got.groups] == ["flat0", "live0", "flat1", "live1"] and len(env.calls) == 1
    assert env.extra_calls == []
    assert got.counts == {"dynamic/zero_variance": 2.0, "dynamic/dropped": 0.0, "dynamic/oversampled": 0.0,
                          "dynamic/resampled": 0.0, "dynamic/surplus": 0.0, "dynamic/short": 0.0,
                          "dynamic/rounds": 0.0, "groups/trained": 4.0}


def test_on_oversampled_up_front_and_the_batch_filled_from_the_survivors():
    env, got = _run(["flat0", "live0", "flat1", "live1"], dynamic=True)
    # 2x up front: 4 more tasks (round 0), none already in the batch, all in one collection
    assert env.extra_calls == [(0, 4, {"flat0", "live0", "flat1", "live1"})]
    assert env.calls == [["flat0", "live0", "flat1", "live1", "flat2", "live2", "flat3", "live3"]]
    assert [g.task for g in got.groups] == ["live0", "live1", "live2", "live3"] and len(got.sampled) == 8
    assert not any(low_variance(g) for g in got.groups)
    assert got.counts == {"dynamic/zero_variance": 4.0, "dynamic/dropped": 4.0, "dynamic/oversampled": 4.0,
                          "dynamic/resampled": 4.0, "dynamic/surplus": 0.0, "dynamic/short": 0.0,
                          "dynamic/rounds": 0.0, "groups/trained": 4.0}
    # the skills staged by every group are committed (admission is by execution, not by rewards)
    assert got.staged == [f"skill-of-{n}" for n in env.calls[0]]


def test_on_a_batch_the_survivors_cannot_fill_is_trained_short():
    env, got = _run(["flat0", "flat1", "flat2", "live0"], dynamic=True, oversample=1.5)
    # 1.5x: 2 more tasks, live1 and live2; 3 survivors for 4 places, no further round (as the release)
    assert env.calls == [["flat0", "flat1", "flat2", "live0", "live1", "live2"]]
    assert [g.task for g in got.groups] == ["live0", "live1", "live2"]
    assert got.counts["dynamic/short"] == 1.0 and got.counts["dynamic/rounds"] == 0.0
    assert got.counts["dynamic/oversampled"] == 2.0 and got.counts["dynamic/dropped"] == 3.0
    # the fallback (rl.dynamic_max_factor above the oversampling): 1 place at a share of 3/6 → 2
    # tasks more (round 1): flat3, live3 → full
    env, got = _run(["flat0", "flat1", "flat2", "live0"], dynamic=True, oversample=1.5, factor=3.0)
    assert env.extra_calls[1] == (1, 2, {"flat0", "flat1", "flat2", "live0", "live1", "live2"})
    assert [g.task for g in got.groups] == ["live0", "live1", "live2", "live3"]
    assert got.counts["dynamic/rounds"] == 1.0 and got.counts["dynamic/resampled"] == 4.0
    assert got.counts["dynamic/short"] == 0.0


def test_on_survivors_beyond_the_batch_are_not_trained_on():
    env, got = _run(["flat0", "live0", "live1", "live2"], dynamic=True, only_live=True)
    # up front: live3..live6; 7 survivors, the step's own tasks first
    assert env.calls[0][4:] == ["live3", "live4", "live5", "live6"] and len(env.calls) == 1
    assert [g.task for g in got.groups] == ["live0", "live1", "live2", "live3"]
    assert got.counts["dynamic/surplus"] == 3.0 and got.counts["groups/trained"] == 4.0


def test_fallback_rounds_alone_until_full_or_the_bound():
    """No oversampling (rl.dynamic_oversample=1), the fallback rounds only."""
    env, got = _run(["flat0", "live0", "live1", "live2"], dynamic=True, oversample=1.0, factor=3.0)
    # 1 place at a share of 3/4 → 2 tasks: flat1, flat2 (both rejected); then a share of 3/6 → 2
    # more: flat3, live3 → full
    assert env.calls[1:] == [["flat1", "flat2"], ["flat3", "live3"]]
    assert [g.task for g in got.groups] == ["live0", "live1", "live2", "live3"]
    assert got.counts["dynamic/rounds"] == 2.0 and got.counts["dynamic/dropped"] == 4.0
    env, got = _run(["flat0", "flat1", "flat2", "live0"], dynamic=True, oversample=1.0, factor=1.5)
    # 1 of 4 kept: 3 places would take 12 tasks, the bound (6 groups) allows 2: live1, live2
    assert env.extra_calls == [(1, 2, {"flat0", "flat1", "flat2", "live0"})] and len(env.calls) == 2
    assert [g.task for g in got.groups] == ["live0", "live1", "live2"] and len(got.sampled) == 6
    assert got.counts["dynamic/short"] == 1.0 and got.counts["dynamic/resampled"] == 2.0


def test_extra_tasks_are_seeded_unseen_first_and_leave_the_cursor():
    tasks = [Task(name=f"t{i}", level=1, problem_id=i, source="") for i in range(6)]
    s = TaskSampler(tasks, batch=2, seed=3)
    a = [t.name for t in s.extra_for(step=4, rank=0, round_=1, n=3, exclude={"t0", "t1"})]
    assert a == [t.name for t in TaskSampler(tasks, 2, 3).extra_for(4, 0, 1, 3, {"t0", "t1"})]  # a resumed run
    assert len(set(a)) == 3 and not {"t0", "t1"} & set(a)
    assert a != [t.name for t in s.extra_for(step=4, rank=1, round_=1, n=3, exclude={"t0", "t1"})]
    more = [t.name for t in s.extra_for(step=4, rank=0, round_=2, n=8, exclude={f"t{i}" for i in range(5)})]
    assert more[0] == "t5" and len(more) == 8  # the one unseen task first, then repeats
    assert s.cursor(4) == 8 and [t.name for t in s.batch_for(1)] == [t.name for t in TaskSampler(tasks, 2, 3).batch_for(1)]


def test_config():
    cfg = load_config(None, [])
    assert (cfg.rl.dynamic_sampling, cfg.rl.dynamic_oversample, cfg.rl.dynamic_max_factor) == (False, 2.0, 0.0)
    for recipe in ("qwen3-8b.yaml", "qwen3-14b.yaml"):  # the release's: on, 2x up front, no further rounds
        r = load_config(ROOT / "configs" / recipe).rl
        assert (r.dynamic_sampling, r.dynamic_oversample, r.dynamic_max_factor) == (True, 2.0, 0.0)
    rows = {k: h for k, _, h in help_table()}
    assert rows["rl.dynamic_sampling"].startswith("[R]") and "no reward variance" in rows["rl.dynamic_sampling"]
    assert "1e-6" in rows["rl.dynamic_sampling"] and rows["rl.dynamic_oversample"].startswith("[R]")
    assert "rl.batch_tasks" in rows["rl.dynamic_max_factor"]
    with pytest.raises(ConfigError, match=r"^rl.dynamic_oversample=0.5: must be at least 1"):
        load_config(None, ["rl.dynamic_oversample=0.5"])
    with pytest.raises(ConfigError, match=r"^rl.dynamic_max_factor=-1.0: must be 0 \(no further rounds\) or more"):
        load_config(None, ["rl.dynamic_max_factor=-1"])
    with pytest.raises(ConfigError, match="rl.dynamic_sampling='sometimes': expected true or false"):
        load_config(None, ["rl.dynamic_sampling=sometimes"])


class _HalfFlat:
    """The synthetic environment, with every even-numbered task's group made flat: one turn
    per rollout, each with the same correct 1.0× result, and no summaries."""

    def __new__(cls, cfg):
        from davinci_kernel.rl.synthetic import SyntheticEnv

        class Env(SyntheticEnv):
            def collect(self, tasks, generator, step):
                self.collected = getattr(self, "collected", []) + [[t.name for t in tasks]]
                groups = super().collect(tasks, generator, step)
                for t, g in zip(tasks, groups):
                    if t.problem_id % 2 == 0:
                        for ep in g.episodes:
                            ep.turns = ep.turns[:1]
                            ep.turns[0].result = _result(1.0)
                        g.summaries, g.verifications = [], []
                return groups

        return Env(cfg)


def _step(tmp_path, dynamic: bool) -> dict:
    from davinci_kernel.rl.trainer import RLTrainer

    cfg = load_config(ROOT / "configs" / "tiny-cpu.yaml", ["rl.steps=1", "rl.eval_every=0", "rl.save_every=1000",
                                                            f"rl.dynamic_sampling={str(dynamic).lower()}"])
    env = _HalfFlat(cfg)
    trainer = RLTrainer(cfg, out=tmp_path / str(dynamic), env=env)
    batch = [t.name for t in trainer.sampler.batch_for(1)]
    flat = sum(1 for t in trainer.sampler.batch_for(1) if t.problem_id % 2 == 0)
    assert 0 < flat < len(batch)  # the step's batch has both kinds
    m = trainer.step(1)
    assert env.collected[0][:len(batch)] == batch
    assert m["dynamic/zero_variance"] >= flat
    if dynamic:  # one collection of 2x the batch; the batch filled from the survivors
        assert len(env.collected) == 1 and len(env.collected[0]) == 2 * len(batch)
        assert not set(env.collected[0][len(batch):]) & set(batch)
        assert m["dynamic/dropped"] == m["dynamic/zero_variance"]
        assert m["dynamic/oversampled"] == m["dynamic/resampled"] == len(batch)
        assert m["groups/trained"] == min(len(batch), 2 * len(batch) - m["dynamic/zero_variance"])
        assert m["dynamic/short"] == len(batch) - m["groups/trained"]
    else:
        assert env.collected == [batch] and m["groups/trained"] == len(batch)
        assert m["dynamic/dropped"] == m["dynamic/resampled"] == 0
    return m


def test_trainer_steps_with_and_without_dynamic_sampling(tmp_path):
    """Same seed, same first tasks; on, the flat groups are rejected and survivors of the
    oversampled tasks take their places."""
    off = _step(tmp_path, False)
    on = _step(tmp_path, True)
    assert on["samples"] > off["samples"] > 0


def test_sample_seconds_add_up_over_a_steps_collections(monkeypatch):
    """rl.env=rollout: ``sample_s`` is the step's sampling time over all its collections, also
    from a server's backend, whose own count runs over the whole run."""
    import davinci_kernel.rollout as rollout
    from davinci_kernel.rl.env import RolloutEnv

    class Backend:
        busy_s = 0.0

    class ServerGen:
        def __init__(self):
            self.b = Backend()

        def backend(self, max_batch):
            return self.b

    def fake_collect(tasks, backend, **kw):
        backend.busy_s += 1.5 * len(tasks)
        return []

    monkeypatch.setattr(rollout, "collect_groups", fake_collect)
    env = object.__new__(RolloutEnv)  # the store and evaluator are not needed here
    env.cfg, env.store, env.evaluator, env.admission = load_config(None, []), None, None, None
    env._last_backend, env._busy = None, (0, 0.0)
    assert env.metrics([]) == {}
    gen = ServerGen()
    env.collect(["a", "b"], gen, 1)
    env.collect(["c"], gen, 1)
    assert env.metrics([]) == {"sample_s": (4.5, 1.0)}
    env.collect(["d"], gen, 2)
    assert env.metrics([]) == {"sample_s": (1.5, 1.0)}
