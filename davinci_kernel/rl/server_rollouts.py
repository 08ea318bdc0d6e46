"""The trainer's side of rollouts through a generation server: connect, sync, probe, close.

Covers: ``ServerRollouts.open`` (reach or start the server, check it can take this run's
kind of weight sync, push the trainer's current weights as version ``start_step`` — a
resumed run re-syncs whatever the server held — and probe that its log-probs match the
trainer's), ``sync(model, step)`` after each optimizer step (returns the step's
``weight_version`` and ``sync_s``), and ``close`` (stops a server this run started).

Does not cover: sampling (``server_gen.py``) or the sync's requests (``weight_sync.py``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import UsageError
from .server_gen import ServerGenerator, connect_server, probe_logprobs, serving_dtype
from .weight_sync import SyncFailed, WeightSync, is_tied, untied_copy


def trainer_scorer(model, temperature: float, autocast=None):
    """``score(prompt_ids, completion_ids) -> list[float]``: the trainer model's log-probs of
    the completion at ``temperature``, under ``autocast`` (a dtype, or None) as ``update.py``
    scores them."""
    import contextlib

    from .losses import token_logprobs

    @torch.no_grad()
    def score(prompt: list[int], completion: list[int]) -> list[float]:
        dev = next(model.parameters()).device
        ids = torch.tensor([prompt + completion], device=dev)
        was = model.training
        model.eval()
        cast = torch.autocast(dev.type, dtype=autocast) if autocast is not None else contextlib.nullcontext()
        try:
            with cast:
                logits = model(input_ids=ids, use_cache=False).logits[0, len(prompt) - 1:-1]  # (C, V)
        finally:
            model.train(was)
        return token_logprobs(logits.float(), ids[0, len(prompt):], temperature).tolist()

    return score


def check_head_size(kind: str, model) -> None:
    """vLLM's CPU attention needs a head size of at least 32 (a one-line ``UsageError``)."""
    cfg = getattr(model, "config", None)
    head = getattr(cfg, "head_dim", None) or (cfg.hidden_size // cfg.num_attention_heads if cfg else None)
    if kind == "vllm" and not torch.cuda.is_available() and head is not None and head < 32:
        raise UsageError(f"vLLM's CPU attention needs a head size of at least 32; this model's is {head}: use "
                         "rl.model=tiny:hidden=128,heads=4 (head size 32) for a CPU smoke run")


def _autocast(cfg):
    from .modeling import mixed_precision

    return torch.bfloat16 if mixed_precision(cfg.rl.bf16) == "bf16" else None


class ServerRollouts:
    @classmethod
    def open(cls, cfg, base: Path, out: Path, model, tokenizer, version: int, echo=None) -> ServerRollouts:
        echo = echo or (lambda msg: None)
        r = cfg.rl
        if not (r.generator_url or r.generator_python):
            raise UsageError(f"rl.generator={r.generator} needs rl.generator_python (the python of the server's own "
                             "venv, e.g. .venv-vllm/bin/python) or rl.generator_url (a running server)")
        if r.generator_sync == "lora" and r.lora_r == 0:
            raise UsageError("rl.generator_sync=lora needs rl.lora_r > 0 (there is no adapter to hot-load); "
                             "use full or auto")
        mode = r.generator_sync if r.generator_sync != "auto" else ("lora" if r.lora_r > 0 else "full")
        if mode == "full" and r.lora_r > 0:
            raise UsageError("rl.generator_sync=full with rl.lora_r > 0 is not built (the adapter is synced alone): "
                             "use lora or auto")
        if mode == "lora" and r.generator == "sglang":
            raise UsageError("LoRA sync to SGLang is not built: use rl.generator=vllm, or full weights (rl.lora_r=0)")
        serve_dir = Path(base)
        check_head_size(r.generator, model)
        tied = r.generator == "vllm" and mode == "full" and is_tied(serve_dir)
        if tied and not r.generator_url:
            serve_dir = untied_copy(serve_dir, Path(out) / "sync" / "base-untied")
        conn = connect_server(cfg, serve_dir, Path(out), echo=echo)
        try:
            if tied and r.generator_url:
                raise UsageError(f"{base} ties its input and output embeddings, and vLLM's in-place reload leaves a "
                                 "tied output head on its old weights: let the trainer start the server "
                                 "(rl.generator_python; it serves an untied copy), or use LoRA sync")
            sync = WeightSync(conn.client, Path(out) / "sync", mode, serving_dtype(cfg), tokenizer)
            sync.check()
            secs = sync.push(model, version)
            gen = ServerGenerator(conn.client, tokenizer, model=model, lora_name=sync.lora_name)
            gap = probe_logprobs(gen, trainer_scorer(model, cfg.rollout.temperature, _autocast(cfg)), cfg.rollout.temperature)
            echo(f"{r.generator} weights at version {version} ({mode} sync, {secs:.1f} s); probe log-prob gap "
                 f"mean {gap['mean_gap']:.2e}, max {gap['max_gap']:.2e}")
        except BaseException:
            conn.close()
            raise
        return cls(conn, sync, gen, cfg.rollout.temperature, _autocast(cfg))

    def __init__(self, conn, sync: WeightSync, generator: ServerGenerator, temperature: float = 1.0,
                 autocast=None):
        self.conn, self.weights, self.generator = conn, sync, generator
        self.temperature, self.autocast = temperature, autocast

    def sync(self, model, step: int) -> dict:
        """Push ``model`` as version ``step``, then check on a probe that the server samples
        with it (``SyncFailed`` when its log-probs disagree with the trainer's)."""
        if self.conn.process is not None and not self.conn.process.alive():
            raise SyncFailed(f"the generation server exited (code {self.conn.process.proc.returncode}) before "
                             f"the weight sync to version {step}; its log: {self.conn.process.log_path}")
        secs = self.weights.push(model, step)
        try:
            gap = probe_logprobs(self.generator, trainer_scorer(model, self.temperature, self.autocast), self.temperature)
        except UsageError as e:
            raise SyncFailed(f"after the weight sync to version {step}: {e}") from None
        return {"weight_version": step, "sync_s": secs, "sync_probe_gap": gap["mean_gap"]}

    def close(self) -> None:
        self.conn.close()
