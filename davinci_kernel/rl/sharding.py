"""Fully sharded training of the shared backbone (``rl.fsdp``): torch's FSDP2 (``fully_shard``).

Covers: sharding a transformers causal LM over the processes of a run (each decoder layer
one unit, then the root: parameters, gradients and AdamW state are split, every rank
holds 1/world of them), keeping it whole while the model generates (each rank rolls out
its own task groups, with different lengths: no collective may run per forward step),
and gathering full model and optimizer state dicts for a checkpoint (and loading them
back). Works on CPU with gloo as on GPUs with NCCL, so the two-process test runs in CI.

Does not cover: DDP (accelerate wraps the model then), LoRA adapters (small enough to
replicate: use DDP), or the update itself (``update.py`` runs unchanged on a sharded model;
gradients are reduce-scattered at every micro-batch).
"""

from __future__ import annotations

import contextlib
from typing import Optional

import torch


def _fsdp():
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    return FSDPModule, MixedPrecisionPolicy, fully_shard


def block_classes(model) -> set[str]:
    """Names of the repeated blocks to shard one by one (transformers' ``_no_split_modules``)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    if not names:
        raise ValueError(f"{type(model).__name__} names no repeated blocks (_no_split_modules): cannot shard it")
    return names


def shard_model(model, bf16: bool):
    """Shard ``model`` in place over the default process group; returns it.

    bf16: parameters are gathered in bf16 for compute, gradients reduced in float32 (the
    sharded master weights stay float32)."""
    _, MixedPrecisionPolicy, fully_shard = _fsdp()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    names = block_classes(model)
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if not blocks:
        raise ValueError(f"none of {sorted(names)} found in {type(model).__name__}: cannot shard it")
    for b in blocks:
        fully_shard(b, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    return model


@contextlib.contextmanager
def gathered(model):
    """While active, every unit of a sharded model stays unsharded across forward calls,
    so ``generate`` runs no collective and ranks may generate different amounts. No-op for
    a model that is not sharded. Costs one whole copy of the (compute-dtype) weights."""
    FSDPModule = _fsdp()[0]
    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for u in units:
        u.unshard()
        u.set_reshard_after_forward(False, recurse=False)
    try:
        yield model
    finally:
        for u in units:
            u.reshard()
            u.set_reshard_after_forward(True, recurse=False)


def full_state(model, optimizer) -> tuple[Optional[dict], Optional[dict]]:
    """(model state dict, optimizer state dict keyed by parameter names), whole, on CPU, on
    rank 0 (None elsewhere). Every rank must call it: it gathers the shards."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    msd = get_model_state_dict(model, options=opts)
    osd = get_optimizer_state_dict(model, optimizer, options=opts)
    if dist.get_rank() != 0:
        return None, None
    names: dict = {}  # a tied weight (lm_head = embeddings) once, under its first name, as transformers saves it
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    for also in names.values():
        for k in also[1:]:
            msd.pop(k, None)
    return msd, osd


def load_optimizer(model, optimizer, osd: dict) -> None:
    """Load a whole, name-keyed optimizer state dict (``full_state``) into the shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, optim_state_dict=osd, options=StateDictOptions(full_state_dict=True))


def base_class_name(model) -> str:
    """The model's own class name (FSDP2 makes a subclass named FSDP<Name>)."""
    FSDPModule = _fsdp()[0]
    return next(c.__name__ for c in type(model).__mro__ if not issubclass(c, FSDPModule))


def names_keyed(osd: dict, names: list[str]) -> dict:
    """An optimizer state dict keyed by parameter index (``optimizer.state_dict()``) → keyed
    by parameter name, as ``load_optimizer`` takes it; ``names[i]`` names parameter i."""
    return {"state": {names[int(i)]: v for i, v in osd["state"].items()},
            "param_groups": [{**g, "params": [names[int(i)] for i in g["params"]]} for g in osd["param_groups"]]}
