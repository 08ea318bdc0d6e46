"""The policy-gradient loss over generated tokens of all three roles.

Covers: token log-probs from logits, the clipped token-level policy-gradient objective
(PPO-style clip 0.2 / 0.28 for off-policy micro-steps; on-policy the ratio is 1 and it is
plain REINFORCE with the advantage), optional per-token importance weights (TIS),
token-mean aggregation, and per-role loss / advantage statistics.

Inputs are flat over the kept (generated, unmasked) tokens of a micro-batch: prompts and
environment feedback never reach these functions because the trainer only gathers logits
at completion positions. Does not cover: which tokens those are (``sequences.py``).
"""

from __future__ import annotations

from typing import Optional

import torch

ROLES = ("select", "policy", "summary", "verify")
ROLE_ID = {r: i for i, r in enumerate(ROLES)}


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """logits (..., V), targets (...) → log π(target) (...) in float32, at ``temperature``."""
    x = logits.float()
    if temperature != 1.0:
        x = x / temperature
    picked = x.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (...)
    return picked - torch.logsumexp(x, dim=-1)  # (...)


def pg_token_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                  clip_low: float = 0.2, clip_high: float = 0.28,
                  weights: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """All (K,) over kept tokens → per-token loss (K,), clipped flag (K,).

    loss_k = −w_k · min(ρ_k A_k, clip(ρ_k, 1−clip_low, 1+clip_high) A_k), ρ = exp(new − old).
    """
    ratio = torch.exp(new_logp - old_logp.detach())  # (K,)
    unclipped = ratio * adv  # (K,)
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv  # (K,)
    loss = -torch.minimum(unclipped, clipped)  # (K,)
    if weights is not None:
        loss = loss * weights.detach()
    was_clipped = (clipped < unclipped).detach()  # (K,) the clip was active
    return loss, was_clipped


def token_mean(per_token: torch.Tensor, denom: float) -> torch.Tensor:
    """Σ per_token / denom: token-mean when ``denom`` is the token count of the whole
    (mini-)batch, so that micro-batches of different sizes add up to one mean."""
    return per_token.sum() / max(float(denom), 1.0)


class RoleStats:
    """Running sums of loss, advantage, |advantage|, clip hits and tokens per role."""

    def __init__(self) -> None:
        self.sums = torch.zeros(len(ROLES), 5, dtype=torch.float64)  # loss, adv, |adv|, clipped, tokens

    def add(self, loss: torch.Tensor, adv: torch.Tensor, clipped: torch.Tensor, role: torch.Tensor) -> None:
        """All (K,); role holds ``ROLE_ID`` values."""
        vals = torch.stack([loss.detach().double(), adv.double(), adv.abs().double(),
                            clipped.double(), torch.ones_like(adv, dtype=torch.float64)], dim=-1)  # (K, 5)
        self.sums.index_add_(0, role.long().cpu(), vals.cpu())

    def summary(self, sums: Optional[torch.Tensor] = None) -> dict[str, float]:
        s = self.sums if sums is None else sums
        out: dict[str, float] = {}
        for i, role in enumerate(ROLES):
            n = float(s[i, 4])
            if n == 0:
                continue
            out[f"loss/{role}"] = float(s[i, 0]) / n
            out[f"adv_mean/{role}"] = float(s[i, 1]) / n
            out[f"adv_abs/{role}"] = float(s[i, 2]) / n
            out[f"clip_frac/{role}"] = float(s[i, 3]) / n
            out[f"tokens/{role}"] = n
        return out
