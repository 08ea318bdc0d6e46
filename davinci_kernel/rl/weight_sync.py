"""Pushing the trainer's weights into a live generation server after every optimizer step.

Covers: ``WeightSync``, which saves the weights into the run folder (``OUT/sync/``) and
swaps them in place on the server, never by restarting it:
- full weights in the serving dtype; vLLM: ``/pause`` → ``collective_rpc reload_weights``
  → ``/reset_prefix_cache`` → ``/resume`` (a reload alone keeps cached prefixes computed
  with the old weights); SGLang: ``/update_weights_from_disk`` with ``flush_cache``;
- LoRA runs: the adapter alone, hot-loaded in place under one name (``/v1/load_lora_adapter``
  with ``load_inplace``; needs no development endpoints).
A model with tied input and output embeddings is served from an untied copy
(``untied_copy``): vLLM's in-place reload leaves a tied head on its old weights.
``check()`` refuses at start-up, in one line, a server that lacks what the chosen mode
needs. A sync that fails raises ``SyncFailed``; the server is then left paused (never
resumed on half-loaded weights) and the trainer stops the run.

Does not cover: NCCL broadcast of weights (GPU only; docs/generation-servers.md names its
endpoints), or sharded models (the trainer refuses rl.fsdp with a server).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import torch

from ..errors import UsageError
from ..llm.server_client import ServerClient, ServerError

LORA_NAME = "dvk-policy"


class SyncFailed(ServerError):
    """A weight sync did not complete; the message names the version and the stage."""


def write_weights(state_dict: dict, folder: Path, dtype: torch.dtype) -> None:
    """``folder/model.safetensors`` with every tensor of ``state_dict`` as its own copy in
    ``dtype``: a tied output head is written out under its own name too, as an untied
    server (``untied_copy``) reads it."""
    from safetensors.torch import save_file

    sd = {k: v.detach().to("cpu", dtype).contiguous().clone() for k, v in state_dict.items()}
    save_file(sd, str(Path(folder) / "model.safetensors"), metadata={"format": "pt"})


def is_tied(model_dir: Path) -> bool:
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return bool(cfg.get("tie_word_embeddings", False))


def untied_copy(model_dir: Path, target: Path) -> Path:
    """A copy of ``model_dir`` whose output head is its own weight (a copy of the input
    embedding, so the model computes the same). vLLM's in-place reload leaves a tied head
    on its old weights (it places the head's old tensors back, as its log says: "ParallelLMHead:
    Failed to load weights"), so a server that is synced in place serves an untied copy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = Path(target)
    if (target / "model.safetensors").is_file():
        return target
    tmp = target.with_name(target.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    write_weights(model.state_dict(), tmp, torch.float32)
    model.config.tie_word_embeddings = False
    model.config.save_pretrained(str(tmp))
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(str(tmp))
    AutoTokenizer.from_pretrained(str(model_dir)).save_pretrained(str(tmp))
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)
    return target


class WeightSync:
    def __init__(self, client: ServerClient, folder: Path, mode: str, dtype: str, tokenizer=None):
        self.client = client
        self.folder = Path(folder)
        self.mode = mode  # full | lora
        self.dtype = getattr(torch, dtype)
        self.tokenizer = tokenizer
        self.version = -1
        self.last_s = 0.0

    @property
    def lora_name(self):
        return LORA_NAME if self.mode == "lora" else None

    def check(self) -> None:
        """A one-line ``UsageError`` when the server cannot take this kind of sync."""
        if self.client.kind == "vllm" and self.mode == "full" and not self.client.has_dev_endpoints():
            raise UsageError(f"the vLLM server at {self.client.url} has no weight-reload endpoint "
                             "(/collective_rpc): start it with VLLM_SERVER_DEV_MODE=1, or use LoRA sync "
                             "(rl.lora_r > 0, server started with --enable-lora)")

    # ------------------------------------------------------------------ saving
    def _save(self, model, version: int) -> Path:
        """The weights to push, written once to ``sync/v<version>`` (a rerun rewrites it)."""
        target = self.folder / f"v{version}"
        tmp = self.folder / f"v{version}.tmp"
        for p in (tmp, target):
            if p.exists():
                shutil.rmtree(p)
        tmp.mkdir(parents=True)
        if self.mode == "lora":
            model.save_pretrained(str(tmp))  # a peft model writes its adapter alone
        else:
            write_weights(model.state_dict(), tmp, self.dtype)
            model.config.save_pretrained(str(tmp))
        tmp.rename(target)
        return target

    def _prune(self, keep: Path) -> None:
        for p in self.folder.glob("v*"):
            if p != keep and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)

    # ------------------------------------------------------------------ pushing
    def push(self, model, version: int) -> float:
        """Save and load ``model``'s weights as ``version``; seconds taken. ``SyncFailed`` on failure."""
        t0 = time.perf_counter()
        folder = self._save(model, version)
        stage = "load"
        c = self.client
        try:
            if self.mode == "lora":
                stage = "load_lora_adapter"
                c.load_lora(LORA_NAME, str(folder.resolve()))
            elif c.kind == "sglang":
                stage = "update_weights_from_disk"
                c.update_weights_from_disk(str(folder.resolve()), version)
            else:
                steps = (("pause", c.pause), ("reload_weights", lambda: c.reload_weights(str(folder.resolve()))),
                         ("reset_prefix_cache", c.reset_prefix_cache), ("resume", c.resume))
                for name, call in steps:
                    stage = name  # named in the error line when this call fails
                    call()
        except ServerError as e:
            raise SyncFailed(f"weight sync to version {version} failed at {stage}: {e}") from None
        self._prune(folder)
        self.version = version
        self.last_s = time.perf_counter() - t0
        return self.last_s
