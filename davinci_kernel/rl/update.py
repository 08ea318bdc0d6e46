"""One policy update of the shared backbone from a list of samples.

Covers: packing into micro-batches by tokens, the old-policy log-prob pass (needed for
off-policy mini-batches and for comparing against another engine's log-probs), mismatch
rejection or TIS weights (with the share of samples kept and the mean / max |trainer − rollout|
log-prob gap, as metrics), the clipped token-level loss aggregated over each mini-batch
(across processes too) as ``rl.loss_agg`` says (``losses.agg_coefficients``; a sequence is
one sample, i.e. one turn's completion; tokens and sequences a mismatch rejection drops do
not count), gradient accumulation without intermediate
all-reduce, gradient clipping and the optimizer step. Under several processes every
rank runs the same number of micro-batches (empty ones are padded in) so collective
calls line up.

Does not cover: where samples come from (``sequences.py``) or logging (``trainer.py``).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Optional

import torch

from .losses import (
    RoleStats,
    agg_coefficients,
    aggregate,
    autocast_dtype,
    linear_logprobs,
    pg_token_loss,
    token_logprobs,
)
from .rejection import segment_mismatch_keep, tis_weights
from .sequences import Row, Sample, layout, split_minibatches


@dataclass
class UpdateSettings:
    clip_low: float = 0.2
    clip_high: float = 0.28
    temperature: float = 1.0
    mismatch: str = "reject"  # reject | tis | off
    tis_cap: float = 2.0
    grad_clip: float = 1.0
    micro_batch_tokens: int = 8192
    minibatches: int = 1
    layout: str = "padded"  # padded | packed (see sequences.py)
    logprobs: str = "fused"  # fused | chunked (see row_logprobs)
    loss_agg: str = "seq-mean-token-sum"  # losses.LOSS_AGGS (rl.loss_agg; the release's)
    loss_scale: float = 1000.0  # seq-mean-token-sum only (rl.loss_scale)


    @classmethod
    def from_config(cls, cfg) -> UpdateSettings:
        impl = cfg.rl.logprob_impl
        if impl == "auto":  # the fused head reads its weight outside the forward: not under FSDP
            impl = "chunked" if cfg.rl.fsdp else "fused"
        return cls(cfg.rl.clip_low, cfg.rl.clip_high, cfg.rollout.temperature, cfg.rl.mismatch, cfg.rl.tis_cap,
                   cfg.rl.grad_clip, cfg.rl.micro_batch_tokens, cfg.rl.minibatches, cfg.rl.micro_batch_layout, impl,
                   cfg.rl.loss_agg, cfg.rl.loss_scale)


def _unwrapped(model):
    """The model inside DDP / FSDP wrappers (peft forwards attribute lookups itself)."""
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    return model


def _output_head(model):
    """The output embedding (lm_head) under any DDP / FSDP / peft wrapping, or None."""
    inner = _unwrapped(model)
    get = getattr(inner, "get_output_embeddings", None)
    head = get() if callable(get) else None
    return head if isinstance(head, torch.nn.Module) else None


def _fusable(model, head) -> bool:
    """The fused path computes ``head(h)`` itself: only for a plain linear head whose
    logits the model does not rescale or cap afterwards."""
    cfg = getattr(_unwrapped(model), "config", None)
    return (type(head) is torch.nn.Linear and cfg is not None
            and getattr(cfg, "final_logit_softcapping", None) is None and getattr(cfg, "logit_scale", None) is None)


@contextlib.contextmanager
def _head_input(head, rows, fused: bool):
    """While active, the output head's (B, P, H) input is cut to the K hidden rows the loss
    needs (``rows`` = (b, p) indices, or None when the input already is (1, K, H)):
    - not fused: the head computes logits for those K rows only, as one (1, K, H) batch,
      and no (K, V) copy is gathered out of a (B, P, V) block;
    - fused: the head gets an empty input (no logits at all), and the yielded dict holds
      the K rows and the autocast dtype for ``linear_logprobs``.
    A pre-hook, so the forward still runs through every wrapper (DDP's gradient
    bookkeeping included)."""
    got: dict = {}

    def pre(_mod, args):
        h = args[0]  # (B, P, H)
        sel = h[0] if rows is None else h[rows[0], rows[1]]  # (K, H)
        if fused:
            got["h"], got["dtype"] = sel, autocast_dtype(h.device.type)
            return (h[:, :0],) + tuple(args[1:])  # (B, 0, H): an empty logits tensor
        return (sel.unsqueeze(0),) + tuple(args[1:])  # (1, K, H)

    handle = head.register_forward_pre_hook(pre)
    try:
        yield got
    finally:
        handle.remove()


@dataclass
class Staged:
    """One micro-batch's tensors on the device, copied there ahead of its forward pass."""

    ids: torch.Tensor  # (B, L)
    pos: torch.Tensor  # (B, L)
    targets: torch.Tensor  # (K,)
    keep: torch.Tensor  # (P,) logit columns any token needs (packed: the K positions themselves)
    rows: Optional[tuple[torch.Tensor, torch.Tensor]]  # (b (K,), p (K,)) into (B, P), or None when packed
    adv: torch.Tensor  # (K,)
    role: torch.Tensor  # (K,)


def _put(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on ``device``; to CUDA from pinned memory without blocking, so a copy
    queued ahead never stalls the host behind queued GPU work."""
    pinned = device.type == "cuda"
    return (x.pin_memory() if pinned else x).to(device, non_blocking=pinned)


def stage(row: Row, device) -> Staged:
    """``row`` on ``device`` (``_put``). The index arithmetic runs on the host, where the
    positions already are: unique() on the GPU would wait for the device (its output size
    depends on the data)."""
    device = torch.device(device)
    n, width = row.input_ids.shape
    if n == 1:  # one packed row: the kept columns are the K tokens themselves
        keep, rows = row.loss_pos, None
    else:
        b, t = row.loss_pos // width, row.loss_pos % width  # (K,), (K,)
        keep = torch.unique(t)  # (P,) sorted columns any sample needs
        rows = (_put(b, device), _put(torch.searchsorted(keep, t), device))  # each token's (row, kept column)
    return Staged(*(_put(x, device) for x in (row.input_ids, row.position_ids, row.targets, keep)), rows,
                  _put(row.adv, device), _put(row.role, device))


def row_logprobs(model, row: Row | Staged, device, temperature: float, impl: str = "chunked") -> torch.Tensor:
    """Log-probs (K,) of the row's completion tokens; logits only at the needed positions.

    ``impl``: "chunked" (the model makes the K logits rows, log-softmax in row chunks) or
    "fused" (no logits tensor at all; falls back to chunked for heads it cannot fuse)."""
    st = row if isinstance(row, Staged) else stage(row, device)
    head = _output_head(model)
    fused = impl == "fused" and head is not None and _fusable(model, head)
    with _head_input(head, st.rows, fused) if head is not None else contextlib.nullcontext() as got:
        out = model(input_ids=st.ids, position_ids=st.pos, logits_to_keep=st.keep, use_cache=False)
    if fused:
        return linear_logprobs(got["h"], head.weight, head.bias, st.targets, temperature, got["dtype"])
    logits = out.logits[0] if head is not None or st.rows is None else out.logits[st.rows]  # (K, V)
    return token_logprobs(logits, st.targets, temperature)


def _dummy_row() -> Row:
    z = torch.zeros(1, dtype=torch.long)
    return Row(input_ids=torch.zeros(1, 1, dtype=torch.long), position_ids=torch.zeros(1, 1, dtype=torch.long),
               loss_pos=z, targets=z.clone(), adv=torch.zeros(1), role=torch.ones(1, dtype=torch.long),
               seg=z.clone(), rollout_logp=torch.full((1,), float("nan")), samples=[])


class _Dist:
    """The few collectives the update needs (no-ops in one process)."""

    def __init__(self, accelerator=None):
        self.acc = accelerator
        self.world = accelerator.num_processes if accelerator is not None else 1

    def sum(self, x: float) -> float:
        if self.world == 1:
            return float(x)
        t = torch.tensor([float(x)], device=self.acc.device)
        return float(self.acc.reduce(t, reduction="sum").item())

    def max(self, x: int) -> int:
        if self.world == 1:
            return int(x)
        t = torch.tensor([int(x)], device=self.acc.device)
        return int(self.acc.gather(t).max().item())

    def no_sync(self, model, last: bool):
        if self.world == 1 or last:
            return contextlib.nullcontext()
        return self.acc.no_sync(model)

    def backward(self, loss):
        if self.acc is not None:
            self.acc.backward(loss)
        else:
            loss.backward()

    def clip(self, params, max_norm: float):
        """The total gradient norm before clipping, left on the device (read it after the
        optimizer step is queued: reading it here would stall the host before the step)."""
        if self.acc is not None:
            n = self.acc.clip_grad_norm_(params, max_norm)
        else:
            n = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return n if n is not None else 0.0


def _weights(rows: list[Row], old: list[Optional[torch.Tensor]], n_samples: int, s: UpdateSettings,
             info: dict) -> list[torch.Tensor]:
    """Per-token weights (K,) per row: 0 for mismatch-rejected samples, TIS ratios, else 1."""
    if not rows or old[0] is None:
        return [torch.ones_like(r.adv) for r in rows]
    _gap_stats(rows, old, info)
    if s.mismatch == "off":
        return [torch.ones_like(r.adv) for r in rows]
    if s.mismatch == "reject":
        lr = torch.cat([o.cpu() - r.rollout_logp for o, r in zip(old, rows)])
        valid = ~torch.isnan(torch.cat([r.rollout_logp for r in rows]))
        seg = torch.cat([r.seg for r in rows])
        keep = segment_mismatch_keep(lr.double(), valid, seg, n_samples)
        info["mismatch_dropped"] += int((~keep).sum())
        info["mismatch_judged"] += n_samples
        return [keep[r.seg].float() for r in rows]
    return [tis_weights(o.cpu(), r.rollout_logp, s.tis_cap).to(r.adv.dtype) for o, r in zip(old, rows)]


def _dist_max_float(accelerator, x: float) -> float:
    t = torch.tensor([float(x)], device=accelerator.device)
    return float(accelerator.gather(t).max().item())


def _gap_stats(rows: list[Row], old: list[torch.Tensor], info: dict) -> None:
    """Adds the |trainer − rollout| log-prob gaps of tokens with a rollout log-prob to ``info``."""
    for o, r in zip(old, rows):
        valid = ~torch.isnan(r.rollout_logp)
        if bool(valid.any()):
            gap = (o.cpu().double() - r.rollout_logp.double())[valid].abs()
            info["gap_sum"] += float(gap.sum())
            info["gap_n"] += int(valid.sum())
            info["logprob_gap_max"] = max(info["logprob_gap_max"], float(gap.max()))


def update(model, optimizer, samples: list[Sample], s: UpdateSettings, accelerator=None,
           device=None) -> dict:
    """Run ``s.minibatches`` optimizer steps over ``samples``; returns metrics (global over ranks)."""
    dist = _Dist(accelerator)
    if device is None:
        device = accelerator.device if accelerator is not None else next(model.parameters()).device
    device = torch.device(device)
    params = [p for p in model.parameters() if p.requires_grad]
    n_minis = dist.max(len(split_minibatches(samples, s.minibatches)) if samples else 0)
    minis = split_minibatches(samples, s.minibatches) if samples else []
    minis += [[] for _ in range(n_minis - len(minis))]
    has_rollout_lp = any(x.rollout_logprobs is not None for x in samples)
    need_old = dist.max(int(s.minibatches > 1 or (s.mismatch != "off" and has_rollout_lp))) > 0
    info = {"mismatch_dropped": 0, "optimizer_steps": 0, "grad_norm": 0.0, "update_tokens": 0,
            "mismatch_judged": 0, "gap_sum": 0.0, "gap_n": 0, "logprob_gap_max": 0.0}
    stats = RoleStats()
    t0 = time.perf_counter()
    packed = []
    for mini in minis:
        rows = layout(mini, s.micro_batch_tokens, s.layout)
        rows += [_dummy_row() for _ in range(dist.max(len(rows)) - len(rows))]
        packed.append(rows)
    olds: list[list[Optional[torch.Tensor]]] = []
    for rows in packed:
        if need_old:
            with torch.no_grad():
                old = [row_logprobs(model, r, device, s.temperature, s.logprobs).float() for r in rows]
        else:
            old = [None] * len(rows)
        olds.append(old)
    weights = [_weights(rows, old, len(mini), s, info) if mini else [torch.zeros_like(r.adv) for r in rows]
               for mini, rows, old in zip(minis, packed, olds)]
    for mini, rows, old, ws in zip(minis, packed, olds, weights):
        n_tokens = dist.sum(sum(float((w > 0).sum()) for w in ws))
        if n_tokens == 0:
            continue
        n_seqs = dist.sum(len({int(i) for r, w in zip(rows, ws) if r.samples for i in r.seg[w > 0].tolist()}))
        seq_len = torch.tensor([len(x.completion_ids) for x in mini] or [1])  # (S,) tokens per sample
        optimizer.zero_grad(set_to_none=True)
        staged = [stage(r, device) for r in rows]  # all copies queued up front, none blocks
        dev_ws = [_put(w, device) for w in ws]
        coefs = [_put(agg_coefficients(seq_len[r.seg.clamp(max=len(seq_len) - 1)], s.loss_agg, n_tokens, n_seqs,
                                       s.loss_scale), device) for r in rows]  # (K,) each
        for i, (row, st, o, w, dw, c) in enumerate(zip(rows, staged, old, ws, dev_ws, coefs)):
            with dist.no_sync(model, last=(i == len(rows) - 1)):
                new = row_logprobs(model, st, device, s.temperature, s.logprobs)
                ref = o if o is not None else new.detach()
                tok_loss, clipped = pg_token_loss(new, ref, st.adv, s.clip_low, s.clip_high, weights=dw)
                loss = aggregate(tok_loss, c) * dist.world  # DDP averages over ranks: × world
                dist.backward(loss)
            if bool((w > 0).any()):  # host weights: no device sync between micro-batches
                stats.add(tok_loss, st.adv, clipped, st.role, keep=dw > 0)
            info["update_tokens"] += row.tokens if row.samples else 0
        info["grad_norm"] = dist.clip(params, s.grad_clip)
        optimizer.step()
        info["optimizer_steps"] += 1
    optimizer.zero_grad(set_to_none=True)
    info["grad_norm"] = float(info["grad_norm"])
    info["update_s"] = time.perf_counter() - t0
    if dist.world > 1:
        sums = stats.sums.to(device)
        stats.sums = accelerator.reduce(sums, reduction="sum").cpu()
        info["mismatch_dropped"] = dist.sum(info["mismatch_dropped"])
        info["update_tokens"] = dist.sum(info["update_tokens"])
        for k in ("mismatch_judged", "gap_sum", "gap_n"):
            info[k] = dist.sum(info[k])
        info["logprob_gap_max"] = _dist_max_float(accelerator, info["logprob_gap_max"])
    judged, gap_n = info.pop("mismatch_judged"), info.pop("gap_n")
    gap_sum = info.pop("gap_sum")
    info["mismatch_kept_share"] = 1.0 - info["mismatch_dropped"] / judged if judged else 1.0
    info["logprob_gap_mean"] = gap_sum / gap_n if gap_n else 0.0
    out = stats.summary()
    out.update(info)
    return out
