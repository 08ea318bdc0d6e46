"""SFT checkpoints: one after every epoch, in ``OUT/checkpoints/step-E`` (E = epochs done),
with the same atomic protocol as RL's (``checkpoint``: written into a temporary folder,
sealed with a manifest, renamed into place; the two newest kept).

Covers: ``save`` (model or adapter + tokenizer, optimizer state, the RNG state of every rank,
``trainer_state.json`` with the epoch, the optimizer step and the seed) and ``load`` (the
newest complete one, a broken one skipped with a warning). The data order of later epochs
is replayed from the seed, so a resumed run sees the same batches as an uninterrupted one.
Does not cover: the training loop (``sft``).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Optional

import torch

from . import checkpoint as ckpt

log = logging.getLogger(__name__)
KEEP = 2


def root(out_dir: Path) -> Path:
    return Path(out_dir) / "checkpoints"


def save(acc, model, opt, tokenizer, out_dir: Path, epoch: int, step: int, seed: int) -> Path:
    """Checkpoint after ``epoch`` epochs (``step`` optimizer steps); every rank calls it."""
    from .modeling import save_model

    r = root(out_dir)
    tmp, final = ckpt.tmp_dir(r, epoch), ckpt.step_dir(r, epoch)
    if acc.is_main_process:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    acc.wait_for_everyone()
    torch.save(ckpt.rng_state(), tmp / f"rng-rank{acc.process_index}.pt")
    unwrapped = acc.unwrap_model(model)
    is_peft = hasattr(unwrapped, "peft_config")
    state_dict = None if is_peft else acc.get_state_dict(model)
    if acc.is_main_process:
        save_model(unwrapped, tokenizer, tmp / "model", state_dict=state_dict)
        torch.save(opt.state_dict(), tmp / "optimizer.pt")
        state = {"epoch": epoch, "step": step, "seed": seed, "world_size": acc.num_processes,
                 "model": "adapter" if is_peft else "full", "saved_at": time.time()}
        (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1))
    acc.wait_for_everyone()
    if acc.is_main_process:
        ckpt.seal(tmp, final)
        ckpt.prune(r, KEEP)
    acc.wait_for_everyone()
    return final


def latest(out_dir: Path) -> Optional[tuple[int, Path]]:
    """(epochs done, folder) of the newest complete checkpoint, or None."""
    r = root(out_dir)
    return ckpt.latest_complete(r) if r.is_dir() else None


def load(out_dir: Path, base, s, echo) -> Optional[tuple[dict, Path, object]]:
    """(trainer state, folder, model) of the newest checkpoint that loads, or None when there is none."""
    from .modeling import is_adapter_dir, load_model

    bad: list[int] = []
    r = root(out_dir)
    while r.is_dir():
        found = ckpt.latest_complete(r, skip=tuple(bad))
        if found is None:
            break
        epoch, path = found
        try:
            state = json.loads((path / "trainer_state.json").read_text())
            mdir = path / "model"
            if is_adapter_dir(mdir):
                model = load_model(base, bf16=s.bf16, grad_checkpointing=s.grad_checkpointing, adapter=mdir)
            else:
                model = load_model(mdir, bf16=s.bf16, grad_checkpointing=s.grad_checkpointing)
            echo(f"sft: resumed from {path} (epoch {epoch})")
            return state, path, model
        except Exception as e:  # noqa: BLE001 - a checkpoint whose files cannot be read: try the one before
            log.warning("checkpoint %s could not be loaded (%s); trying the previous one", path, e)
            bad.append(epoch)
    log.warning("no complete SFT checkpoint under %s; starting from epoch 0", r)
    return None


def restore(acc, opt, path: Path) -> None:
    """Optimizer state and this rank's RNG state from checkpoint ``path``."""
    opt.load_state_dict(torch.load(path / "optimizer.pt", map_location="cpu", weights_only=False))
    rng_file = path / f"rng-rank{acc.process_index}.pt"
    if rng_file.is_file():
        ckpt.set_rng_state(torch.load(rng_file, weights_only=False))
