"""Joint training off (``rl.joint_training=false``, the paper's "no joint training" ablation):
selection and summary turns are still sampled and keep their rewards, but only the policy's
loss reaches the gradient of the shared backbone. Checked on the advantages, on the samples,
on the gradient of one update of a tiny model, and end to end for a trainer step."""

import random

import pytest
import torch
from conftest import grad_recorder

from davinci_kernel.config import help_table, load_config
from davinci_kernel.records import Completion, Episode, TaskGroup, Turn
from davinci_kernel.rl.sequences import build_samples
from davinci_kernel.rl.trainer import prepare_group

TASK = "level1/1_relu"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _group() -> TaskGroup:
    """Two selection schemes + the null scheme, two one-turn rollouts each, two summaries."""
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "write a relu kernel"}]

    def turn(role, text, **kw):
        return Turn(role=role, task=TASK, messages=msgs, completion=Completion(text=text), **kw)

    sels = [turn("select", f"pick skill {i} because it is fast", scheme=i, turn=i) for i in range(2)]
    eps = [Episode(TASK, si, r, turns=[turn("policy", f"kernel code {si} {r} tl.load tl.store", scheme=si,
                                            rollout=r, reward=[0.2, 1.4, 0.6][si] + 0.3 * r)])
           for si in range(3) for r in range(2)]
    summ = [turn("summary", "new skill: tile the loads", turn=0, reward=1.5),
            turn("summary", "new skill: nothing useful", turn=1, reward=0.0)]
    return TaskGroup(task=TASK, schemes=[["a"], ["b"], []], selections=sels, episodes=eps, summaries=summ)


def _prepared(joint: bool) -> TaskGroup:
    cfg = load_config(None, ["rl.prs=false", f"rl.joint_training={str(joint).lower()}"])
    g = _group()
    assert prepare_group(g, cfg, random.Random(0)) == 0
    return g


def test_config_switch():
    assert load_config(None, []).rl.joint_training is True
    assert load_config(None, ["rl.joint_training=false"]).rl.joint_training is False
    (row,) = [r for r in help_table() if r[0] == "rl.joint_training"]
    assert row[2].startswith("[P]") and "no joint training" in row[2]


def test_advantages_and_samples_policy_only():
    on, off = _prepared(True), _prepared(False)
    assert all(t.advantage != 0 for t in on.selections + on.summaries)
    assert all(t.advantage == 0 for t in off.selections + off.summaries)
    # still sampled, rewards still recorded (logged as reward/select, reward/summary)
    assert [t.reward for t in off.selections] == [t.reward for t in on.selections] == pytest.approx([0.35, 1.55])
    assert [t.reward for t in off.summaries] == [1.5, 0.0]
    # the policy's advantages do not change
    assert [t.advantage for e in off.episodes for t in e.turns] == [t.advantage for e in on.episodes for t in e.turns]
    from davinci_kernel.llm.tiny import train_tokenizer

    tok = train_tokenizer()
    assert {s.role for s in build_samples([on], tok)} == {"select", "policy", "summary"}
    assert {s.role for s in build_samples([off], tok)} == {"policy"}


def test_selection_and_summary_losses_do_not_reach_the_gradient(tmp_path):
    from davinci_kernel.llm.tiny import build_tiny
    from davinci_kernel.rl.modeling import load_model, load_tokenizer
    from davinci_kernel.rl.update import UpdateSettings, update

    path = build_tiny(tmp_path / "m")
    tok = load_tokenizer(path)
    model = load_model(path, bf16=False, grad_checkpointing=False)
    settings = UpdateSettings(grad_clip=1e9, mismatch="off", micro_batch_tokens=4096)

    def grad(samples):
        opt = grad_recorder(model.parameters())
        update(model, opt, samples, settings, device="cpu")
        return torch.cat([g.reshape(-1) for g in opt.grads])

    on = build_samples([_prepared(True)], tok)
    off = build_samples([_prepared(False)], tok)
    g_off = grad(off)
    g_policy = grad([s for s in on if s.role == "policy"])
    g_on = grad(on)
    g_others = grad([s for s in on if s.role != "policy"])
    assert g_policy.norm() > 0 and g_others.norm() > 0  # both kinds of loss would move the backbone
    torch.testing.assert_close(g_off, g_policy)  # off: exactly the policy's gradient
    assert (g_on - g_off).norm() > 1e-3 * g_on.norm()  # on: the other roles' losses are in it


@pytest.mark.parametrize("joint", [True, False])
def test_trainer_step(tmp_path, joint):
    from davinci_kernel.rl.synthetic import SyntheticEnv
    from davinci_kernel.rl.trainer import RLTrainer

    cfg = load_config("configs/tiny-cpu.yaml", ["rl.steps=1", "rl.save_every=1000", "rl.eval_every=0",
                                                f"rl.joint_training={str(joint).lower()}", "rl.minibatches=1"])
    m = RLTrainer(cfg, out=tmp_path, env=SyntheticEnv(cfg)).step(1)
    assert "reward/select" in m and "reward/summary" in m  # the agents ran either way
    assert "tokens/policy" in m
    trained = {k.split("/")[1] for k in m if k.startswith("tokens/")}
    assert trained == ({"select", "policy", "summary"} if joint else {"policy"})
