"""Single-token attention steps of grouped-query models that read each cached head once.

transformers' ``sdpa`` attention (5.22 and earlier; 5.24 packs the heads itself) repeats
every key/value head ``n_rep`` times whenever it gets an attention mask, and a
left-padded batch of prompts always has one; so each sampled token copied the whole KV
cache of every layer. On an H200, 64 first-turn policy prompts of ~6k tokens through a
0.5B Qwen3 (16 query / 8 key-value heads) ran out of its 140 GB that way, and 16 at a
time ran at ~150 tokens/s (``bench/rollout_sampling.py``). ``grouped_decode(model)``
switches the model, while it samples, to an attention function that, for a one-token
query, lays the ``n_rep`` query heads of each key/value head side by side as queries of
that head — (B, H, 1, D) → (B, KVH, n_rep, D) — so one fused attention call reads the
cache as it is, with the same mask for every head. Longer queries (encoding the prompt)
go to transformers' ``sdpa`` unchanged.

Covers: the attention function, its registration with transformers' attention and mask
interfaces, and the context manager that switches a model (plain, peft-wrapped, FSDP) to
it and back and keeps sampling's attention off cuDNN meanwhile. Does not cover: sampling
(``hf_backend.py``, ``rl/local_gen.py``) or models whose attention is not ``sdpa`` (they
are left as they are).
"""

from __future__ import annotations

import contextlib

import torch

NAME = "dvk_grouped_sdpa"
_registered = False


def grouped_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers attention-function signature; query (B, H, Q, D), key/value (B, KVH, L, D)
    → ((B, Q, H, D), None)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    b, h, q_len, d = query.shape
    kvh = key.shape[1]
    shared_mask = attention_mask is None or (attention_mask.dim() == 4 and attention_mask.shape[1] == 1)
    if (q_len != 1 or kvh == h or h % kvh or not shared_mask or dropout
            or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    q = query.reshape(b, kvh, h // kvh, d)  # (B, KVH, n_rep, D): a group's heads as its queries
    if attention_mask is not None and attention_mask.dtype != torch.bool and attention_mask.dtype != q.dtype:
        attention_mask = attention_mask.to(q.dtype)  # an additive mask (older transformers)
    out = torch.nn.functional.scaled_dot_product_attention(q, key, value, attn_mask=attention_mask,
                                                           scale=scaling)  # (B, KVH, n_rep, Dv)
    out = out.reshape(b, h, 1, value.shape[-1]).transpose(1, 2).contiguous()  # (B, 1, H, Dv)
    return out, None


def _register() -> bool:
    global _registered
    if _registered:
        return True
    try:
        from transformers import AttentionInterface
    except ImportError:
        return False
    AttentionInterface.register(NAME, grouped_sdpa)
    try:
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionMaskInterface.register(NAME, sdpa_mask)  # the masks sdpa gets
    except ImportError:
        pass  # transformers without a mask interface builds masks from the name alone
    _registered = True
    return True


def _configs(model) -> list:
    """Every config object the model's layers read their attention choice from."""
    seen, out = set(), []
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and id(cfg) not in seen and hasattr(cfg, "_attn_implementation"):
            seen.add(id(cfg))
            out.append(cfg)
    return out


def _no_cudnn_attention():
    """PyTorch's attention without its cuDNN backend: cuDNN builds an execution plan for
    every new key length, and a decode step is a new key length each time (on an H200 that
    cost ~16 ms of host time per attention call, more than the whole step's device time;
    ``bench/results/rollout_sampling_h200.json``). Flash / memory-efficient / math attention
    have no per-shape set-up."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # older torch: no cuDNN attention either
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


@contextlib.contextmanager
def grouped_decode(model):
    """Inside: the model's ``sdpa`` attention takes single-token steps through ``grouped_sdpa``,
    and no attention call goes to cuDNN."""
    cfgs = [c for c in _configs(model) if c._attn_implementation == "sdpa"]
    with _no_cudnn_attention():
        if not cfgs or not _register():
            yield
            return
        for c in cfgs:
            c._attn_implementation = NAME
        try:
            yield
        finally:
            for c in cfgs:
                c._attn_implementation = "sdpa"
