"""From task groups to packed training rows.

Covers: turning every kept, non-zero-advantage turn of every role into a ``Sample``
(prompt token ids, completion token ids, advantage, rollout log-probs), splitting the
samples into mini-batches, and packing them into rows of at most ``max_tokens`` tokens.
A packed row restarts ``position_ids`` at 0 for each sample; with no attention mask,
transformers turns that into a block-diagonal causal mask, so samples never see each
other. Loss positions are the positions whose next token is a completion token: prompt
and environment-feedback tokens (earlier turns and their feedback live in the prompt)
are never trained on.

Does not cover: the forward pass or the loss (``trainer.py``, ``losses.py``). Turns with
advantage 0 carry no gradient and are not packed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

import torch

from ..records import TaskGroup, Turn
from .losses import ROLE_ID


@dataclass
class Sample:
    role: str
    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    rollout_logprobs: Optional[list[float]] = None
    task: str = ""

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)


@dataclass
class Row:
    """One packed micro-batch row; loss tensors are flat over its K loss positions."""

    input_ids: torch.Tensor  # (1, L)
    position_ids: torch.Tensor  # (1, L)
    loss_pos: torch.Tensor  # (K,) positions whose logits predict a completion token
    targets: torch.Tensor  # (K,) the completion tokens
    adv: torch.Tensor  # (K,)
    role: torch.Tensor  # (K,) ROLE_ID
    seg: torch.Tensor  # (K,) index of the sample in the mini-batch
    rollout_logp: torch.Tensor  # (K,) nan where the rollout gave none
    samples: list[int] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return int(self.input_ids.shape[1])


def render_prompt(tokenizer, messages: list[dict]) -> list[int]:
    """Chat messages → prompt token ids with the generation prompt appended."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def turn_sample(turn: Turn, tokenizer) -> Optional[Sample]:
    """A kept turn with a completion and a non-zero advantage → Sample, else None."""
    c = turn.completion
    if not turn.kept or c is None or c.error or turn.advantage is None or turn.advantage == 0:
        return None
    prompt = list(c.prompt_token_ids) if c.prompt_token_ids else render_prompt(tokenizer, turn.messages)
    if c.token_ids:
        comp, logps = list(c.token_ids), (list(c.logprobs) if c.logprobs else None)
    else:
        comp, logps = list(tokenizer(c.text, add_special_tokens=False)["input_ids"]), None
    if not comp or not prompt:
        return None
    if logps is not None and len(logps) != len(comp):
        logps = None
    return Sample(turn.role, prompt, comp, float(turn.advantage), logps, turn.task)


def group_turns(group: TaskGroup) -> Iterable[Turn]:
    yield from group.selections
    for ep in group.episodes:
        yield from ep.turns
    yield from group.summaries


def build_samples(groups: Iterable[TaskGroup], tokenizer) -> list[Sample]:
    out = []
    for g in groups:
        for t in group_turns(g):
            s = turn_sample(t, tokenizer)
            if s is not None:
                out.append(s)
    return out


def split_minibatches(samples: list[Sample], n: int) -> list[list[Sample]]:
    """Contiguous split into ``n`` mini-batches of near-equal size (empty ones dropped)."""
    n = max(1, min(n, len(samples)))
    size, rem = divmod(len(samples), n)
    out, i = [], 0
    for k in range(n):
        j = i + size + (1 if k < rem else 0)
        out.append(samples[i:j])
        i = j
    return [m for m in out if m]


def pack(samples: list[Sample], max_tokens: int) -> list[Row]:
    """First-fit-decreasing packing into rows of ≤ ``max_tokens`` (a longer sample gets its own row)."""
    order = sorted(range(len(samples)), key=lambda i: -samples[i].length)
    bins: list[list[int]] = []
    used: list[int] = []
    for i in order:
        n = samples[i].length
        for b in range(len(bins)):
            if used[b] + n <= max_tokens:
                bins[b].append(i)
                used[b] += n
                break
        else:
            bins.append([i])
            used.append(n)
    return [_row(samples, b) for b in bins]


def _row(samples: list[Sample], idx: list[int]) -> Row:
    ids, pos, loss_pos, targets, adv, role, seg, rlp = [], [], [], [], [], [], [], []
    for i in idx:
        s = samples[i]
        start = len(ids)
        seq = s.prompt_ids + s.completion_ids
        ids += seq
        pos += list(range(len(seq)))
        p0 = start + len(s.prompt_ids) - 1  # logits here predict the first completion token
        for k, tok in enumerate(s.completion_ids):
            loss_pos.append(p0 + k)
            targets.append(tok)
            adv.append(s.advantage)
            role.append(ROLE_ID[s.role] if s.role in ROLE_ID else ROLE_ID["policy"])
            seg.append(i)
            rlp.append(s.rollout_logprobs[k] if s.rollout_logprobs is not None else float("nan"))
    return Row(
        input_ids=torch.tensor([ids], dtype=torch.long),
        position_ids=torch.tensor([pos], dtype=torch.long),
        loss_pos=torch.tensor(loss_pos, dtype=torch.long),
        targets=torch.tensor(targets, dtype=torch.long),
        adv=torch.tensor(adv, dtype=torch.float32),
        role=torch.tensor(role, dtype=torch.long),
        seg=torch.tensor(seg, dtype=torch.long),
        rollout_logp=torch.tensor(rlp, dtype=torch.float32),
        samples=list(idx),
    )
