"""Policy-gradient loss: on-policy gradient, clipping, loss aggregation (rl.loss_agg), role statistics, packing."""

import pytest
import torch

from davinci_kernel.rl.losses import (
    LOSS_AGGS,
    ROLE_ID,
    RoleStats,
    agg_coefficients,
    aggregate,
    pg_token_loss,
    token_logprobs,
)
from davinci_kernel.rl.sequences import Sample, pack


def test_on_policy_gradient_is_reinforce():
    logits = torch.randn(4, 7, requires_grad=True)
    targets = torch.tensor([1, 2, 3, 4])
    adv = torch.tensor([1.0, -2.0, 0.5, 0.0])
    lp = token_logprobs(logits, targets)
    loss, clipped = pg_token_loss(lp, lp.detach(), adv)
    aggregate(loss, agg_coefficients(torch.ones(4), "token-mean", 4, 1)).backward()
    ref_logits = logits.detach().clone().requires_grad_(True)
    ref = -(token_logprobs(ref_logits, targets) * adv).mean()
    ref.backward()
    assert torch.allclose(logits.grad, ref_logits.grad, atol=1e-6)
    assert not clipped.any()


def _plain_logprobs(logits, targets, temperature):
    x = logits.float() / temperature
    return x.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(x, dim=-1)


@pytest.mark.parametrize("shape", [(1, 5), (7, 3), (2, 9, 33), (130, 257)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_logprobs_match_plain(monkeypatch, shape, dtype, temperature):
    """Values and gradients of the chunked log-probs equal autograd through the plain
    formula, also when the rows are split into many small chunks."""
    import davinci_kernel.rl.losses as losses

    monkeypatch.setattr(losses, "CHUNK_ELEMENTS", 2 * shape[-1] + 1)  # two rows per chunk
    torch.manual_seed(0)
    base = (torch.randn(*shape) * 3).to(dtype)
    targets = torch.randint(0, shape[-1], shape[:-1])
    g = torch.randn(shape[:-1])
    a = base.clone().requires_grad_(True)
    b = base.clone().requires_grad_(True)
    got = token_logprobs(a, targets, temperature)
    want = _plain_logprobs(b, targets, temperature)
    assert got.dtype == torch.float32 and got.shape == targets.shape
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    (got * g).sum().backward()
    (want * g).sum().backward()
    assert a.grad.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(a.grad, b.grad, atol=tol, rtol=tol)


def test_clip_bounds():
    old = torch.zeros(4)
    new = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5]))
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, clipped = pg_token_loss(new, old, adv, 0.2, 0.28)
    # ratio 1.5, A>0 → clipped at 1.28; A<0 → unclipped 1.5 (pessimistic); ratio 0.5, A>0 → 0.5; A<0 → 0.8
    assert loss.tolist() == pytest.approx([-1.28, 1.5, -0.5, 0.8])
    assert clipped.tolist() == [True, False, False, True]


@pytest.mark.parametrize("mode,scale,want", [
    ("token-mean", 1.0, 10 / 4),  # (1 + 2 + 3 + 4) / 4 tokens
    ("seq-mean-token-sum", 1.0, (6 + 4) / 2),  # token sums 6 and 4, mean over 2 sequences
    ("seq-mean-token-sum", 1000.0, (6 + 4) / 2 / 1000),  # the release's scale
    ("seq-mean-token-mean", 1.0, (6 / 3 + 4 / 1) / 2),  # token means 2 and 4
    ("token-mean", 1000.0, 10 / 4),  # the scale is seq-mean-token-sum's alone
])
def test_loss_aggregation_hand_computed_over_micro_batches(mode, scale, want):
    """Two sequences, a = [1, 2, 3] and b = [4]; a in one micro-batch, b in the next: the
    parts, each with the mini-batch's counts (4 tokens, 2 sequences), add up to the loss."""
    a, b = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0])
    ca = agg_coefficients(torch.full((3,), 3), mode, n_tokens=4, n_seqs=2, scale=scale)  # (3,)
    cb = agg_coefficients(torch.full((1,), 1), mode, n_tokens=4, n_seqs=2, scale=scale)  # (1,)
    assert (aggregate(a, ca) + aggregate(b, cb)).item() == pytest.approx(want)
    with pytest.raises(ValueError, match="allowed values are token-mean"):
        agg_coefficients(torch.ones(1), "sum", 1, 1)


def test_the_config_offers_the_loss_aggregations_and_the_recipes_use_the_releases():
    from pathlib import Path

    from davinci_kernel.config import ConfigError, RLConfig, choices_of, help_table, load_config
    from davinci_kernel.rl.update import UpdateSettings

    root = Path(__file__).resolve().parents[1] / "configs"
    assert choices_of(RLConfig, "loss_agg") == LOSS_AGGS
    d = load_config(None, [])
    assert (d.rl.loss_agg, d.rl.loss_scale) == ("seq-mean-token-sum", 1000.0)
    for recipe in ("qwen3-8b.yaml", "qwen3-14b.yaml", "tiny-cpu.yaml"):
        cfg = load_config(root / recipe)
        assert (cfg.rl.loss_agg, cfg.rl.loss_scale) == ("seq-mean-token-sum", 1000.0)
        s = UpdateSettings.from_config(cfg)
        assert (s.loss_agg, s.loss_scale) == ("seq-mean-token-sum", 1000.0)
    helps = {k: h for k, _, h in help_table()}
    assert helps["rl.loss_agg"].startswith("[R]") and "the release's" in helps["rl.loss_agg"]
    with pytest.raises(ConfigError, match=r"^rl.loss_scale=0.0: must be more than 0$"):
        load_config(None, ["rl.loss_scale=0"])
    with pytest.raises(ConfigError, match=r"^rl.loss_agg='sum': allowed values are token-mean"):
        load_config(None, ["rl.loss_agg=sum"])


def test_role_stats():
    st = RoleStats()
    st.add(torch.tensor([1.0, 3.0, 2.0]), torch.tensor([0.5, -0.5, 2.0]), torch.tensor([False, True, False]),
           torch.tensor([ROLE_ID["policy"], ROLE_ID["policy"], ROLE_ID["select"]]))
    s = st.summary()
    assert s["loss/policy"] == 2.0 and s["adv_abs/policy"] == 0.5 and s["clip_frac/policy"] == 0.5
    assert s["tokens/select"] == 1 and s["adv_mean/select"] == 2.0
    assert "loss/summary" not in s


def test_role_stats_keep_mask_equals_dropping_tokens():
    loss, adv = torch.tensor([1.0, 3.0, 2.0, 9.0]), torch.tensor([0.5, -0.5, 2.0, 7.0])
    clipped = torch.tensor([False, True, False, True])
    role = torch.tensor([ROLE_ID["policy"], ROLE_ID["policy"], ROLE_ID["select"], ROLE_ID["summary"]])
    keep = torch.tensor([True, True, True, False])
    masked, dropped = RoleStats(), RoleStats()
    masked.add(loss, adv, clipped, role, keep=keep)
    dropped.add(loss[keep], adv[keep], clipped[keep], role[keep])
    assert masked.summary() == dropped.summary() and "loss/summary" not in masked.summary()


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


def test_batch_right_pads_and_points_loss_positions_at_completions():
    from davinci_kernel.rl.sequences import batch

    s1 = Sample("policy", [10, 11, 12], [13, 14], 1.0, [-0.1, -0.2])
    s2 = Sample("select", [20], [21, 22, 23], -1.0)
    s3 = Sample("policy", [30, 31, 32, 33, 34], [35], 0.5)
    rows = batch([s1, s2, s3], max_tokens=11)  # longest first: 6 (2 × 6 > 11) | 5, 4 (2 × 5 ≤ 11)
    assert [r.input_ids.shape for r in rows] == [(1, 6), (2, 5)]
    r = rows[1]
    flat = r.input_ids.reshape(-1).tolist()
    for p, t in zip(r.loss_pos.tolist(), r.targets.tolist()):
        assert flat[p + 1] == t  # next token of each loss position is its target
    assert sorted(r.targets.tolist()) == [13, 14, 21, 22, 23]
    assert r.tokens == 9 and r.input_ids[1, 4].item() == 0  # padding is not counted


@pytest.mark.parametrize("how", ["padded", "packed"])
@pytest.mark.parametrize("max_tokens", [7, 12, 64])
def test_every_loss_token_carries_its_samples_fields(how, max_tokens):
    """Advantage, role, sample index and rollout log-prob of each loss token are those of
    the sample and completion position it came from (checked token by token)."""
    from davinci_kernel.rl.losses import ROLES
    from davinci_kernel.rl.sequences import layout

    samples = [Sample("policy", [10, 11, 12], [13, 14], 1.0, [-0.1, -0.2]),
               Sample("select", [20], [21, 22, 23], -1.0),
               Sample("summary", [30, 31, 32, 33, 34], [35], 0.5, [-0.35]),
               Sample("odd-role", [40, 41], [42, 43, 44, 45], 2.0, [-0.42, -0.43, -0.44, -0.45])]
    seen = []
    for r in layout(samples, max_tokens, how):
        flat = r.input_ids.reshape(-1).tolist()
        for p, t, a, role, seg, lp in zip(r.loss_pos.tolist(), r.targets.tolist(), r.adv.tolist(), r.role.tolist(),
                                          r.seg.tolist(), r.rollout_logp.tolist()):
            s = samples[seg]
            c = s.completion_ids.index(t)  # targets are unique across the samples
            assert flat[p + 1] == t and a == s.advantage
            assert ROLES[role] == (s.role if s.role in ROLES else "policy")
            assert (lp != lp) if s.rollout_logprobs is None else lp == pytest.approx(s.rollout_logprobs[c])
            seen.append(t)
    assert sorted(seen) == sorted(t for s in samples for t in s.completion_ids)


@pytest.mark.parametrize("lengths", [[(5, 3), (2, 4), (7, 1)], [(4, 4), (4, 4)]])
def test_layouts_give_the_same_logprobs(tmp_path, lengths):
    """Padded (B, L) batches, packed rows and one sample at a time agree on a real model."""
    from davinci_kernel.llm.tiny import build_tiny
    from davinci_kernel.rl.modeling import load_model
    from davinci_kernel.rl.sequences import batch
    from davinci_kernel.rl.update import row_logprobs

    torch.manual_seed(0)
    model = load_model(build_tiny(tmp_path / "m"), bf16=False, grad_checkpointing=False).eval()
    g = torch.Generator().manual_seed(1)
    samples = [Sample("policy", torch.randint(5, 300, (p,), generator=g).tolist(),
                      torch.randint(5, 300, (c,), generator=g).tolist(), 1.0) for p, c in lengths]

    def by_sample(rows):
        out = {}
        with torch.no_grad():
            for r in rows:
                lp = row_logprobs(model, r, "cpu", 1.0)
                for i in set(r.seg.tolist()):
                    out[i] = lp[r.seg == i]
        return out

    alone = {i: by_sample(pack([s], 64))[0] for i, s in enumerate(samples)}  # one sample per forward
    for rows in (batch(samples, 64), pack(samples, 64)):
        got = by_sample(rows)
        for i in range(len(samples)):
            torch.testing.assert_close(got[i], alone[i], atol=1e-5, rtol=1e-5)


def test_output_head_sees_only_needed_rows(tmp_path, monkeypatch):
    """Padded rows: the head computes logits for the K loss tokens only, and values and
    gradients equal gathering them out of the full (B, P, V) block."""
    import davinci_kernel.rl.update as update
    from davinci_kernel.llm.tiny import build_tiny
    from davinci_kernel.rl.modeling import load_model
    from davinci_kernel.rl.sequences import batch

    torch.manual_seed(0)
    model = load_model(build_tiny(tmp_path / "m"), bf16=False, grad_checkpointing=False)
    g = torch.Generator().manual_seed(2)
    samples = [Sample("policy", torch.randint(5, 300, (p,), generator=g).tolist(),
                      torch.randint(5, 300, (c,), generator=g).tolist(), 1.0) for p, c in [(6, 3), (2, 5), (3, 2)]]
    (row,) = batch(samples, 64)
    assert row.input_ids.shape[0] == 3
    seen = []
    hook = update._output_head(model).register_forward_hook(lambda m, a, o: seen.append(tuple(a[0].shape)))

    def run():
        model.zero_grad()
        lp = update.row_logprobs(model, row, "cpu", 0.8)
        lp.sum().backward()
        return lp.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    lp_hooked, grads_hooked = run()
    monkeypatch.setattr(update, "_output_head", lambda m: None)
    lp_plain, grads_plain = run()
    hook.remove()
    k = len(row.targets)
    assert seen[0] == (1, k, model.config.hidden_size) and seen[1][0] == 3  # hooked: K rows; plain: (B, P, H)
    torch.testing.assert_close(lp_hooked, lp_plain, atol=1e-5, rtol=1e-5)
    assert len(grads_hooked) == len(grads_plain)
    for a, b in zip(grads_hooked, grads_plain):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("layout", ["padded", "packed"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_fused_logprobs_match_chunked(tmp_path, monkeypatch, layout, temperature):
    """The fused path (no logits tensor) gives the chunked path's log-probs and the same
    gradients for every parameter, the tied output head included."""
    import davinci_kernel.rl.losses as losses
    import davinci_kernel.rl.update as update
    from davinci_kernel.llm.tiny import build_tiny
    from davinci_kernel.rl.modeling import load_model
    from davinci_kernel.rl.sequences import layout as make_rows

    monkeypatch.setattr(losses, "CHUNK_ELEMENTS", 3 * 512)  # several row chunks
    torch.manual_seed(0)
    model = load_model(build_tiny(tmp_path / "m"), bf16=False, grad_checkpointing=False)
    g = torch.Generator().manual_seed(3)
    samples = [Sample("policy", torch.randint(5, 300, (p,), generator=g).tolist(),
                      torch.randint(5, 300, (c,), generator=g).tolist(), 1.0) for p, c in [(6, 3), (2, 5), (4, 4)]]
    (row,) = make_rows(samples, 64, layout)
    head = update._output_head(model)
    assert update._fusable(model, head)

    def run(impl):
        model.zero_grad()
        lp = update.row_logprobs(model, row, "cpu", temperature, impl)
        (lp * torch.linspace(-1, 1, len(lp))).sum().backward()
        return lp.detach(), {n: q.grad.clone() for n, q in model.named_parameters() if q.grad is not None}

    lp_c, g_c = run("chunked")
    lp_f, g_f = run("fused")
    torch.testing.assert_close(lp_f, lp_c, atol=1e-5, rtol=1e-5)
    assert g_f.keys() == g_c.keys()
    for name in g_c:
        torch.testing.assert_close(g_f[name], g_c[name], atol=1e-5, rtol=1e-4, msg=name)


def test_fused_logprobs_follow_autocast(tmp_path):
    """Under bf16 autocast the fused head matmuls run in bf16, as the model's own would:
    both paths agree to bf16 accuracy."""
    import davinci_kernel.rl.update as update
    from davinci_kernel.llm.tiny import build_tiny
    from davinci_kernel.rl.modeling import load_model
    from davinci_kernel.rl.sequences import layout as make_rows

    torch.manual_seed(0)
    model = load_model(build_tiny(tmp_path / "m"), bf16=False, grad_checkpointing=False)
    samples = [Sample("policy", list(range(5, 12)), list(range(40, 46)), 1.0),
               Sample("policy", list(range(60, 63)), list(range(70, 79)), 1.0)]
    (row,) = make_rows(samples, 64, "padded")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        chunked = update.row_logprobs(model, row, "cpu", 1.0, "chunked")
        fused = update.row_logprobs(model, row, "cpu", 1.0, "fused")
    assert fused.dtype == torch.float32
    torch.testing.assert_close(fused, chunked, atol=5e-2, rtol=5e-2)


def test_fused_falls_back_for_capped_logits(tmp_path):
    import davinci_kernel.rl.update as update
    from davinci_kernel.llm.tiny import build_tiny
    from davinci_kernel.rl.modeling import load_model

    model = load_model(build_tiny(tmp_path / "m"), bf16=False, grad_checkpointing=False)
    model.config.final_logit_softcapping = 30.0
    assert not update._fusable(model, update._output_head(model))
