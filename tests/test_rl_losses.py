"""Policy-gradient loss: on-policy gradient, clipping, token-mean, role statistics, packing."""

import pytest
import torch

from davinci_kernel.rl.losses import ROLE_ID, RoleStats, pg_token_loss, token_logprobs, token_mean
from davinci_kernel.rl.sequences import Sample, pack


def test_on_policy_gradient_is_reinforce():
    logits = torch.randn(4, 7, requires_grad=True)
    targets = torch.tensor([1, 2, 3, 4])
    adv = torch.tensor([1.0, -2.0, 0.5, 0.0])
    lp = token_logprobs(logits, targets)
    loss, clipped = pg_token_loss(lp, lp.detach(), adv)
    token_mean(loss, 4).backward()
    ref_logits = logits.detach().clone().requires_grad_(True)
    ref = -(token_logprobs(ref_logits, targets) * adv).mean()
    ref.backward()
    assert torch.allclose(logits.grad, ref_logits.grad, atol=1e-6)
    assert not clipped.any()


def test_clip_bounds():
    old = torch.zeros(4)
    new = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5]))
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, clipped = pg_token_loss(new, old, adv, 0.2, 0.28)
    # ratio 1.5, A>0 → clipped at 1.28; A<0 → unclipped 1.5 (pessimistic); ratio 0.5, A>0 → 0.5; A<0 → 0.8
    assert loss.tolist() == pytest.approx([-1.28, 1.5, -0.5, 0.8])
    assert clipped.tolist() == [True, False, False, True]


def test_token_mean_over_micro_batches():
    a, b = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0])
    assert (token_mean(a, 4) + token_mean(b, 4)).item() == pytest.approx(2.5)


def test_role_stats():
    st = RoleStats()
    st.add(torch.tensor([1.0, 3.0, 2.0]), torch.tensor([0.5, -0.5, 2.0]), torch.tensor([False, True, False]),
           torch.tensor([ROLE_ID["policy"], ROLE_ID["policy"], ROLE_ID["select"]]))
    s = st.summary()
    assert s["loss/policy"] == 2.0 and s["adv_abs/policy"] == 0.5 and s["clip_frac/policy"] == 0.5
    assert s["tokens/select"] == 1 and s["adv_mean/select"] == 2.0
    assert "loss/summary" not in s


def test_pack_masks_prompts_and_restarts_positions():
    s1 = Sample("policy", [10, 11, 12], [13, 14], 1.0, [-0.1, -0.2])
    s2 = Sample("select", [20], [21, 22, 23], -1.0)
    rows = pack([s1, s2], max_tokens=16)
    assert len(rows) == 1
    r = rows[0]
    ids = r.input_ids[0].tolist()
    assert sorted(ids) == sorted([10, 11, 12, 13, 14, 20, 21, 22, 23])
    # each loss position's next input token is its target, and all targets are completion tokens
    for p, t in zip(r.loss_pos.tolist(), r.targets.tolist()):
        assert ids[p + 1] == t
    assert sorted(r.targets.tolist()) == [13, 14, 21, 22, 23]
    assert r.position_ids[0].tolist().count(0) == 2
    assert len(pack([s1, s2], max_tokens=5)) == 2
