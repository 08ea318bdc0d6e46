"""From task groups to training micro-batches.

Covers: turning every kept, non-zero-advantage turn of every role into a ``Sample``
(prompt token ids, completion token ids, advantage, rollout log-probs), splitting the
samples into mini-batches, and laying them out as micro-batches of at most ``max_tokens``
tokens, in one of two ways:

- ``batch`` (padded, the default): a (B, L) batch of right-padded samples of similar
  length. Right padding under a causal mask never reaches a real token, so no attention
  mask is passed and SDPA runs its fused causal kernels; attention costs Σ B·L².
- ``pack``: samples concatenated into one (1, L) row with ``position_ids`` restarting at
  0 for each; transformers turns that into a block-diagonal causal mask, so samples never
  see each other. Without flash-attention's variable-length kernels that mask is dense:
  attention costs L² over the whole row, several times the padded layout's.

Loss positions are the positions whose next token is a completion token: prompt
and environment-feedback tokens (earlier turns and their feedback live in the prompt)
are never trained on.

Does not cover: the forward pass or the loss (``trainer.py``, ``losses.py``). Turns with
advantage 0 carry no gradient and are not packed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Optional

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
    """One micro-batch; loss tensors are flat over its K loss positions."""

    input_ids: torch.Tensor  # (B, L): B = 1 when packed
    position_ids: torch.Tensor  # (B, L)
    loss_pos: torch.Tensor  # (K,) flat positions b·L + t whose logits predict a completion token
    targets: torch.Tensor  # (K,) the completion tokens
    adv: torch.Tensor  # (K,)
    role: torch.Tensor  # (K,) ROLE_ID
    seg: torch.Tensor  # (K,) index of the sample in the mini-batch
    rollout_logp: torch.Tensor  # (K,) nan where the rollout gave none
    samples: list[int] = field(default_factory=list)
    real_tokens: int = 0  # tokens that are not padding (0: all of them)

    @property
    def tokens(self) -> int:
        return self.real_tokens or int(self.input_ids.numel())


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


def first_fit(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """First-fit-decreasing bins of indices whose lengths sum to ≤ ``max_tokens`` (a longer
    one gets its own bin)."""
    bins: list[list[int]] = []
    used: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        for b in range(len(bins)):
            if used[b] + lengths[i] <= max_tokens:
                bins[b].append(i)
                used[b] += lengths[i]
                break
        else:
            bins.append([i])
            used.append(lengths[i])
    return bins


def length_groups(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Longest first, consecutive indices while B × (the group's longest length) ≤ ``max_tokens``
    (a longer one gets its own group)."""
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= max_tokens:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def assemble(seqs: list[list[int]], trained: list[Iterable[int]], padded: bool):
    """Token ids and positions of ``seqs`` as one micro-batch, and where each trained token is.

    ``padded``: a (B, L) batch, right-padded with 0, positions 0..L-1 on every row (pads
    continue the count, so no row looks packed). Else one (1, ΣL) row, positions restarting
    per sequence. ``trained[j]`` holds indices k ≥ 1 of ``seqs[j]`` whose token is predicted
    by the logits at position k − 1. Returns ids, positions, and per trained token (K,) its
    flat logit position, its target and its owner as two tensors (j, k). Per sequence, not
    per token: a batch of 64k trained tokens is laid out in milliseconds."""
    lens = [len(x) for x in seqs]
    width = max(lens) if padded else sum(lens)
    n_rows = len(seqs) if padded else 1
    ids = torch.zeros(n_rows * width, dtype=torch.long)
    pos = torch.zeros(n_rows * width, dtype=torch.long)
    loss_pos, targets, own_j, own_k = [], [], [], []
    start = 0
    for j, seq in enumerate(seqs):
        tok = torch.tensor(seq, dtype=torch.long)  # (n_j,)
        ids[start:start + len(seq)] = tok
        span = width if padded else len(seq)
        pos[start:start + span] = torch.arange(span)
        r = trained[j]
        k = (torch.arange(r.start, r.stop, r.step) if isinstance(r, range)
             else torch.tensor(list(r), dtype=torch.long))  # (k_j,)
        loss_pos.append(start + k - 1)
        targets.append(tok[k])
        own_j.append(torch.full_like(k, j))
        own_k.append(k)
        start += span

    def cat(xs: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat(xs) if xs else torch.zeros(0, dtype=torch.long)

    return (ids.view(n_rows, width), pos.view(n_rows, width), cat(loss_pos), cat(targets),
            (cat(own_j), cat(own_k)))


def pack(samples: list[Sample], max_tokens: int) -> list[Row]:
    """First-fit-decreasing packing into single rows of ≤ ``max_tokens``."""
    return [_row(samples, b, padded=False) for b in first_fit([s.length for s in samples], max_tokens)]


def batch(samples: list[Sample], max_tokens: int) -> list[Row]:
    """Right-padded (B, L) batches of similar length with B × L ≤ ``max_tokens``."""
    return [_row(samples, g, padded=True) for g in length_groups([s.length for s in samples], max_tokens)]


def layout(samples: list[Sample], max_tokens: int, how: str = "padded") -> list[Row]:
    """Micro-batches in the chosen layout: ``padded`` (``batch``) or ``packed`` (``pack``)."""
    return pack(samples, max_tokens) if how == "packed" else batch(samples, max_tokens)


def _row(samples: list[Sample], idx: list[int], padded: bool) -> Row:
    chosen = [samples[i] for i in idx]
    ids, pos, loss_pos, targets, (j, k) = assemble(
        [s.prompt_ids + s.completion_ids for s in chosen],
        [range(len(s.prompt_ids), s.length) for s in chosen], padded)
    # per chosen sample (S,), then gathered per trained token (K,) through its owner j
    adv = torch.tensor([s.advantage for s in chosen], dtype=torch.float32)
    role = torch.tensor([ROLE_ID.get(s.role, ROLE_ID["policy"]) for s in chosen], dtype=torch.long)
    seg = torch.tensor(idx, dtype=torch.long)
    comp_len = torch.tensor([len(s.completion_ids) for s in chosen], dtype=torch.long)
    first = torch.cumsum(comp_len, 0) - comp_len  # (S,) where each sample's completion starts in ``flat``
    flat = torch.cat([torch.tensor(s.rollout_logprobs, dtype=torch.float32) if s.rollout_logprobs is not None
                      else torch.full((len(s.completion_ids),), float("nan")) for s in chosen])  # (Σ completion,)
    prompt_len = torch.tensor([len(s.prompt_ids) for s in chosen], dtype=torch.long)
    return Row(
        input_ids=ids, position_ids=pos, loss_pos=loss_pos, targets=targets,
        adv=adv[j], role=role[j], seg=seg[j],
        rollout_logp=flat[first[j] + k - prompt_len[j]],  # index in the completion
        samples=list(idx),
        real_tokens=sum(s.length for s in chosen),
    )
