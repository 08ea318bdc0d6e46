"""Backend for a local transformers model (``hf:PATH``), the same object the trainer updates.

Covers: loading a causal LM and its tokenizer from a directory (or taking ones already
in memory: ``HFBackend(model=..., tokenizer=...)``), rendering prompts with the
tokenizer's chat template, and batched sampling:
- requests grouped by sampling settings, at most ``max_batch`` sequences at once; a batch
  that runs out of GPU memory is retried in halves, and later batches start at the size
  that fit;
- optionally under autocast, as the trainer computes (float32 master weights, bf16
  matmuls), and with prompts encoded in chunks;
- single-token steps of grouped-query models read the KV cache without repeating heads
  (``grouped_decode.py``);
- per-token log-probs of the raw model distribution (before temperature and top-p, as vLLM
  reports by default), recorded one step at a time so long generations never hold a
  (steps x vocab) tensor.
Generation runs in a worker thread so the event loop keeps evaluating kernels meanwhile;
calls that arrive while a batch runs (several task groups in flight) are merged into the
next batch.

Does not cover: training (``rl/``), multi-GPU sharding beyond ``device_map``, or serving
over HTTP (``serve``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import Any, Optional

from ..errors import UsageError
from ..records import Completion
from .base import Backend, GenRequest
from .grouped_decode import grouped_decode

log = logging.getLogger(__name__)


class _LogprobRecorder:
    """A logits processor that remembers log p(chosen token) of each generated step.

    At step t it sees the ids chosen so far, so it reads the previous step's chosen token
    from them; the last step's token is read from the final sequences in ``finish``."""

    def __init__(self):
        self.prev = None
        self.steps: list = []

    def __call__(self, input_ids, scores):
        import torch

        if self.prev is not None:
            self.steps.append(self.prev.gather(1, input_ids[:, -1:]).squeeze(1))
        self.prev = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, sequences):
        if self.prev is not None:
            self.steps.append(self.prev.gather(1, sequences[:, -1:]).squeeze(1))
            self.prev = None
        import torch

        return torch.stack(self.steps, dim=1) if self.steps else None


class HFBackend(Backend):
    gives_token_ids = True

    def __init__(self, path: Optional[str] = None, *, model: Any = None, tokenizer: Any = None,
                 device: Optional[str] = None, dtype: str = "auto", max_batch: int = 16,
                 autocast: Any = None, prefill_chunk: int = 0, grouped: bool = True):
        """``autocast``: a torch dtype to sample under ``torch.autocast`` (the trainer's
        mixed precision, so sampling runs at its speed and its log-probs match the
        trainer's scoring), or None for the weights' own dtype. ``prefill_chunk``: encode
        prompts this many tokens at a time (bounds the attention scratch of long, padded
        prompt batches; 0 = all at once). ``grouped``: single-token steps of grouped-query
        models through ``grouped_decode`` (False: transformers' attention as it is)."""
        if model is None or tokenizer is None:
            if path is None:
                raise UsageError("hf backend needs a model directory: hf:PATH")
            model, tokenizer = load_model(path, device=device, dtype=dtype)
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch = max(1, max_batch)
        self.autocast = autocast
        self.prefill_chunk = max(0, prefill_chunk)
        self.grouped = grouped
        self.name = f"hf:{path}" if path else "hf:<in-memory>"
        self._lock = threading.Lock()
        self._queue: list[tuple[list[GenRequest], asyncio.Future]] = []
        self._drainer: Optional[asyncio.Task] = None
        self.batches = 0  # generate_blocking calls, for tests and benchmarks
        self.busy_s = 0.0  # seconds spent sampling (the rest of a rollout is evaluation and waiting)
        if getattr(tokenizer, "chat_template", None) is None:
            raise UsageError(f"{self.name}: the tokenizer has no chat template; "
                             "add chat_template to tokenizer_config.json")
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    # ------------------------------------------------------------------ prompts
    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    # ------------------------------------------------------------------ generation
    async def _generate(self, requests: list[GenRequest]) -> list[Completion]:
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((requests, fut))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.ensure_future(self._drain())
        return await fut

    async def _drain(self) -> None:
        while self._queue:
            await asyncio.sleep(0)  # let callers started in the same tick join this batch
            batch, self._queue = self._queue, []
            flat = [r for reqs, _ in batch for r in reqs]
            try:
                out = await asyncio.to_thread(self.generate_blocking, flat)
            except Exception as e:  # noqa: BLE001 - handed to every waiting caller
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            i = 0
            for reqs, fut in batch:
                if not fut.done():
                    fut.set_result(out[i:i + len(reqs)])
                i += len(reqs)

    def generate_blocking(self, requests: list[GenRequest]) -> list[Completion]:
        out: list[Optional[Completion]] = [None] * len(requests)
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(r.sampling_key(), []).append(i)
        with self._lock:
            self.batches += 1
            t0 = time.perf_counter()
            for idx in groups.values():
                for start in range(0, len(idx), self.max_batch):
                    chunk = idx[start:start + self.max_batch]
                    for i, c in zip(chunk, self._batch([requests[i] for i in chunk])):
                        out[i] = c
            self.busy_s += time.perf_counter() - t0
        return out  # type: ignore[return-value]

    def _batch(self, reqs: list[GenRequest]) -> list[Completion]:
        """Prompts → ``_sample``; a failure becomes error completions, and running out of
        GPU memory splits the batch in halves (later batches start at the size that fit)."""
        import torch

        try:
            prompts = [self.prompt_ids(r.messages) for r in reqs]
        except Exception as e:  # noqa: BLE001 - a template that rejects a message list
            return [Completion(text="", finish_reason="error", model=self.name,
                               error=f"chat template failed: {e}") for _ in reqs]
        was_training = self.model.training
        self.model.eval()
        try:
            return self._sample(reqs, prompts)
        except torch.cuda.OutOfMemoryError as e:
            if len(reqs) == 1:
                return [Completion(text="", finish_reason="error", model=self.name,
                                   error=f"generation failed: out of memory: {str(e)[:300]}")]
        except Exception as e:  # noqa: BLE001 - the turn fails, the run goes on
            return [Completion(text="", finish_reason="error", model=self.name,
                               error=f"generation failed: {type(e).__name__}: {str(e)[:300]}") for _ in reqs]
        finally:
            if was_training:
                self.model.train()
        # out of memory with several sequences: retried in halves, the failed batch's tensors freed
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        half = (len(reqs) + 1) // 2
        if half < self.max_batch:
            log.warning("%s: %d sequences at once ran out of memory; batches of at most %d from now on",
                        self.name, len(reqs), half)
            self.max_batch = half  # later batches start at a size that fits
        return self._batch(reqs[:half]) + self._batch(reqs[half:])

    def _context(self):
        """Inference mode, the autocast, and grouped single-token attention steps."""
        import torch

        ctx = contextlib.ExitStack()
        ctx.enter_context(torch.inference_mode())
        if self.autocast is not None:
            ctx.enter_context(torch.autocast(torch.device(_model_device(self.model)).type, dtype=self.autocast))
        if self.grouped:
            ctx.enter_context(grouped_decode(self.model))
        return ctx

    def _sample(self, reqs: list[GenRequest], prompts: list[list[int]]) -> list[Completion]:
        """One transformers ``generate`` call over left-padded prompts (model in eval mode)."""
        import torch

        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(reqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(reqs), width), dtype=torch.long)
        for row, p in enumerate(prompts):  # left padding
            ids[row, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[row, width - len(p):] = 1
        device = _model_device(self.model)
        r0 = reqs[0]
        recorder = _LogprobRecorder()
        kwargs: dict[str, Any] = dict(max_new_tokens=r0.max_new_tokens, pad_token_id=pad,
                                      logits_processor=[recorder], return_dict_in_generate=True)
        if self.prefill_chunk and width > self.prefill_chunk:
            kwargs["prefill_chunk_size"] = self.prefill_chunk
        if r0.temperature > 0:
            kwargs.update(do_sample=True, temperature=r0.temperature, top_p=r0.top_p, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if r0.seed is not None:
            torch.manual_seed(r0.seed)
        with self._context():
            res = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), **kwargs)
        seqs = res.sequences
        logps = recorder.finish(seqs)
        gen = seqs[:, width:].tolist()
        lp = logps.tolist() if logps is not None else [[] for _ in reqs]
        return [self._completion(prompts[i], gen[i], lp[i], r0.max_new_tokens) for i in range(len(reqs))]

    def _completion(self, prompt: list[int], gen: list[int], lp: list[float], limit: int) -> Completion:
        eos = _eos_ids(self.model, self.tokenizer)
        cut = len(gen)
        finish = "length" if len(gen) >= limit else "stop"
        for j, t in enumerate(gen):
            if t in eos:
                cut, finish = j + 1, "stop"
                break
        ids = gen[:cut]
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Completion(text=text, token_ids=ids, logprobs=[float(x) for x in lp[:cut]],
                          prompt_token_ids=list(prompt), finish_reason=finish, model=self.name)


def _model_device(model):
    try:
        return next(model.parameters()).device
    except StopIteration:
        return "cpu"


def _eos_ids(model, tokenizer) -> set[int]:
    ids = set()
    cfg_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for v in (cfg_eos, tokenizer.eos_token_id):
        if isinstance(v, int):
            ids.add(v)
        elif isinstance(v, (list, tuple)):
            ids.update(int(x) for x in v)
    return ids


def load_model(path: str, device: Optional[str] = None, dtype: str = "auto"):
    """(model, tokenizer) from a local directory; a bad path is a one-line UsageError."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    p = Path(path).expanduser()
    if not p.is_dir():
        raise UsageError(f"hf:{path}: no such model directory (give a local path with config.json)")
    try:
        tok = AutoTokenizer.from_pretrained(str(p))
        tok.padding_side = "left"
        kw: dict[str, Any] = {}
        if dtype != "auto":
            kw["dtype"] = getattr(torch, dtype)
        elif torch.cuda.is_available():
            kw["dtype"] = torch.bfloat16
        model = AutoModelForCausalLM.from_pretrained(str(p), **kw)
    except (OSError, ValueError) as e:
        raise UsageError(f"hf:{path}: cannot load model: {str(e).splitlines()[0]}") from None
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    return model.to(dev), tok
