"""The update path with ``rl.mismatch=tis``: truncated importance weights reach the gradient
of one update of a tiny model (built from a config, nothing downloaded)."""

import math

import pytest
import torch
from conftest import grad_recorder

from davinci_kernel.config import load_config
from davinci_kernel.llm.tiny import build_tiny
from davinci_kernel.rl.modeling import load_model
from davinci_kernel.rl.sequences import Sample, pack
from davinci_kernel.rl.update import UpdateSettings, row_logprobs, update

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_tis_weights_scale_each_samples_gradient(tmp_path):
    cfg = load_config(None, ["rl.mismatch=tis", "rl.tis_cap=2.0", "rl.grad_clip=1e9"])
    settings = UpdateSettings.from_config(cfg)
    assert settings.mismatch == "tis"
    model = load_model(build_tiny(tmp_path / "m"), bf16=False, grad_checkpointing=False)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, 300, (n,), generator=g).tolist() for n in (5, 3, 4)]
    completions = [torch.randint(5, 300, (n,), generator=g).tolist() for n in (4, 6, 3)]
    with torch.no_grad():
        trainer_lp = [row_logprobs(model, pack([Sample("policy", p, c, 1.0)], 64)[0], "cpu",
                                   settings.temperature, settings.logprobs).tolist()
                      for p, c in zip(prompts, completions)]
    # the rollout engine saw each token 4× less likely (ratio 4, capped at 2), 2× more likely
    # (ratio 0.5), or gave no log-probs (weight 1)
    rollout_lp = [[x - math.log(4) for x in trainer_lp[0]], [x + math.log(2) for x in trainer_lp[1]], None]

    def grad(advantages, rollout, s):
        opt = grad_recorder(model.parameters())
        samples = [Sample("policy", p, c, a, r) for p, c, a, r in zip(prompts, completions, advantages, rollout)]
        update(model, opt, samples, s, device="cpu")
        return torch.cat([x.reshape(-1) for x in opt.grads])

    off = UpdateSettings(**{**settings.__dict__, "mismatch": "off"})
    g_tis = grad([1.0, 1.0, 1.0], rollout_lp, settings)
    g_weighted = grad([2.0, 0.5, 1.0], [None] * 3, off)  # the same weights as advantages
    g_plain = grad([1.0, 1.0, 1.0], rollout_lp, off)
    assert g_tis.norm() > 0
    torch.testing.assert_close(g_tis, g_weighted, atol=1e-6, rtol=1e-4)
    assert (g_tis - g_plain).norm() > 0.1 * g_plain.norm()


def test_loss_aggregation_reaches_the_gradient(tmp_path):
    """Three samples with completions of 4, 6 and 3 tokens (13 tokens, 3 sequences), each in a
    micro-batch of its own. On-policy the gradient is linear in the advantages, so
    seq-mean-token-sum / s is token-mean × 13 / (3 s), and seq-mean-token-mean is token-mean
    with each sample's advantage × 13 / (3 · its length)."""
    base = load_config(None, ["rl.grad_clip=1e9", "rl.mismatch=off", "rl.micro_batch_tokens=16"])
    model = load_model(build_tiny(tmp_path / "m"), bf16=False, grad_checkpointing=False)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(5, 300, (n,), generator=g).tolist() for n in (5, 3, 4)]
    completions = [torch.randint(5, 300, (n,), generator=g).tolist() for n in (4, 6, 3)]

    def grad(advantages, mode, scale=1.0):
        s = UpdateSettings(**{**UpdateSettings.from_config(base).__dict__, "loss_agg": mode, "loss_scale": scale})
        opt = grad_recorder(model.parameters())
        update(model, opt, [Sample("policy", p, c, a) for p, c, a in zip(prompts, completions, advantages)], s,
               device="cpu")
        return torch.cat([x.reshape(-1) for x in opt.grads])

    adv = [1.0, -0.5, 2.0]
    token_mean = grad(adv, "token-mean")
    assert token_mean.norm() > 0
    torch.testing.assert_close(grad(adv, "seq-mean-token-sum", 1000.0), token_mean * 13 / 3000, atol=1e-9, rtol=1e-4)
    torch.testing.assert_close(grad(adv, "seq-mean-token-mean"),
                               grad([a * 13 / (3 * len(c)) for a, c in zip(adv, completions)], "token-mean"),
                               atol=1e-8, rtol=1e-4)
