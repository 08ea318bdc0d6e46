"""SFT cold start of all three agents: chat data → diversity filter per role → packed
loss on the chosen assistant turns only → model.

Covers:
- data (``load_examples``): successful trajectories from ``TaskGroup`` JSONL files or run
  directories — for the policy, per episode its best correct turn, the earlier turns of that
  episode kept as context without loss (``weight: 0``); for the selection agent, the
  ``select_skills`` replies of the schemes whose rollouts did best (highest scheme reward,
  above 0, not beaten by the null scheme); for the summarizer, summary turns that earned a
  reward — OpenAI-format conversation JSONL (``{"messages": [...], "task": ...,
  "role": "policy" | "select" | "summary"}``; an assistant message with ``"weight": 0`` is
  context only, as in OpenAI fine-tuning files), and Hugging Face datasets (``hf:NAME``
  through ``datasets.load_dataset``, ``hf:DIR`` for a dataset saved with ``save_to_disk``)
  with a ``messages`` column;
- the diversity filter, per role (``diversity.py``; against skill collapse for summaries);
- tokenization with a loss mask on the trained assistant tokens only (``encode_chat``), micro-batches of
  ``max_seq_len`` tokens (right-padded (B, L) batches, or packed rows with position ids
  restarting per example: ``sft.micro_batch_layout``), and training
  (AdamW, LoRA option, bf16 where supported, gradient checkpointing, accelerate; token
  log-probs straight from the output head, no logits tensor, as the RL update takes them).

Does not cover: RL (``trainer.py``), producing trajectories (``rollout/``), or how the
filter compares examples (``diversity.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import time
from pathlib import Path
from typing import Optional

import torch

from ..errors import UsageError
from ..files import iter_jsonl
from ..records import TaskGroup, Turn
from ..rollout.rewards import scheme_rewards
from ..rundir import RunDir
from .diversity import SFT_ROLES, Example, FilterReport, diversity_filter, fingerprints, kmeans  # noqa: F401
from .sequences import Row, assemble, first_fit, length_groups


# --------------------------------------------------------------------------- data
def _answered(t: Turn) -> bool:
    """A turn with a prompt and an answer that neither failed nor was rejected (PRS)."""
    return t.kept and t.completion is not None and not t.completion.error and bool(t.messages)


def _with_answer(t: Turn) -> list[dict]:
    """The turn's prompt, earlier assistant turns as context only (``weight: 0``), and its answer."""
    ctx = [dict(m, weight=0) if m.get("role") == "assistant" else dict(m) for m in t.messages]
    return ctx + [{"role": "assistant", "content": t.completion.text}]


def policy_examples(g: TaskGroup) -> list[Example]:
    """Per episode its best correct turn; the earlier (worse or wrong) turns stay context."""
    out = []
    for ep in g.episodes:
        b = ep.best_turn
        if b is None or not _answered(ep.turns[b]):
            continue
        t = ep.turns[b]
        out.append(Example(_with_answer(t), g.task, float(t.result.speedup or 1.0), "trajectory", "policy"))
    return out


def selection_examples(g: TaskGroup) -> list[Example]:
    """The selection replies of the schemes whose rollouts did best.

    A scheme's reward is the mean over its rollouts of the best-turn reward (as for the
    selector's advantage). Kept: parsed replies whose scheme reward is above 0 and the
    highest of the group, the null scheme included — when no skills did better, the
    selection taught nothing worth copying.
    """
    sr = scheme_rewards(g)
    best = max(sr.values(), default=0.0)
    out = []
    for t in g.selections:
        r = sr.get(t.scheme)
        if r is None or r <= 0.0 or r < best - 1e-12 or t.parse_error or not _answered(t):
            continue
        out.append(Example(_with_answer(t), g.task, float(r), "trajectory", "select"))
    return out


def summary_examples(g: TaskGroup) -> list[Example]:
    """Summary turns that earned a reward (a verified skill's speedup)."""
    return [Example(_with_answer(t), g.task, float(t.reward), "trajectory", "summary")
            for t in g.summaries if (t.reward or 0.0) > 0 and _answered(t)]


def examples_from_group(g: TaskGroup) -> list[Example]:
    """SFT examples of all three agents from one task group."""
    return policy_examples(g) + selection_examples(g) + summary_examples(g)


def _from_json(obj: dict, source: str) -> list[Example]:
    if "episodes" in obj:
        return examples_from_group(TaskGroup.from_dict(obj))
    msgs = obj.get("messages")
    if not isinstance(msgs, list) or not any(m.get("role") == "assistant" for m in msgs if isinstance(m, dict)):
        return []
    role = str(obj.get("role") or "policy")
    if role not in SFT_ROLES:
        raise UsageError(f"{source}: role '{role}' is not one of {', '.join(SFT_ROLES)}")
    return [Example(msgs, str(obj.get("task") or ""), float(obj.get("score") or 0.0), source, role)]


def _read_jsonl(path: Path) -> list[Example]:
    def refuse(n: int, why: str) -> None:
        raise UsageError(f"{path}:{n}: {why}")

    out = []
    for _, obj in iter_jsonl(path, on_bad=refuse):
        out += _from_json(obj, str(path))
    return out


def _read_hf(spec: str) -> list[Example]:
    import datasets

    name = spec[3:]
    if Path(name).expanduser().is_dir():
        ds = datasets.load_from_disk(str(Path(name).expanduser()))
    else:
        ds = datasets.load_dataset(name)
    if isinstance(ds, datasets.DatasetDict):
        ds = ds["train"] if "train" in ds else ds[next(iter(ds))]
    if "messages" not in ds.column_names:
        raise UsageError(f"{spec}: the dataset has no 'messages' column (has {', '.join(ds.column_names)})")
    return [e for row in ds for e in _from_json(dict(row), spec)]


def load_examples(specs: list[str]) -> list[Example]:
    """Every example from JSONL files, run directories (their ``*.jsonl``) and ``hf:`` datasets."""
    if not specs:
        raise UsageError("sft.data is empty: give JSONL conversation files, run dirs, or hf:NAME datasets")
    out: list[Example] = []
    for spec in specs:
        if spec.startswith("hf:"):
            out += _read_hf(spec)
            continue
        p = Path(spec).expanduser()
        if p.is_dir():
            for f in sorted(p.rglob("*.jsonl")):
                out += _read_jsonl(f)
        elif p.is_file():
            out += _read_jsonl(p)
        else:
            raise UsageError(f"sft.data: '{spec}' is neither a file, a directory nor hf:NAME")
    return out


# --------------------------------------------------------------------------- tokens
def encode_chat(tokenizer, messages: list[dict]) -> tuple[list[int], list[bool]]:
    """Token ids and a mask that is true on the trained assistant tokens (their end-of-turn
    marker included). An assistant message with ``"weight": 0`` is context, no loss.

    Each trained assistant turn is the text the chat template adds between the conversation
    so far with a generation prompt and the conversation including that turn; the context
    before it (earlier untrained turns included) is tokenized as one piece and the answer as
    another, as prompt and completion are at generation time.
    """
    msgs = [{k: v for k, v in m.items() if k != "weight"} for m in messages]
    ids: list[int] = []
    mask: list[bool] = []
    done = ""
    for i, m in enumerate(messages):
        if m.get("role") != "assistant" or m.get("weight", 1) == 0:
            continue
        prefix = tokenizer.apply_chat_template(msgs[:i], tokenize=False, add_generation_prompt=True)
        full = tokenizer.apply_chat_template(msgs[:i + 1], tokenize=False)
        if not prefix.startswith(done) or not full.startswith(prefix):
            raise ValueError("chat template is not prefix-stable; cannot locate assistant tokens")
        for text, train in ((prefix[len(done):], False), (full[len(prefix):], True)):
            piece = tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
            ids += piece
            mask += [train] * len(piece)
        done = full
    return ids, mask


def pack_examples(encoded: list[tuple[list[int], list[bool]]], max_len: int, layout: str = "padded") -> list[Row]:
    """(ids, mask) pairs (longer than max_len: truncated) into micro-batches of ≤ max_len tokens:
    right-padded (B, L) batches (``padded``) or first-fit packed single rows (``packed``); see
    ``sequences.py`` for why padded is the default."""
    items = [(ids[:max_len], mask[:max_len]) for ids, mask in encoded if any(mask[1:max_len])]
    lengths = [len(seq) for seq, _ in items]
    padded = layout == "padded"
    rows = []
    for g in (length_groups if padded else first_fit)(lengths, max_len):
        ids, pos, loss_pos, targets, _ = assemble(
            [items[i][0] for i in g], [[k for k in range(1, lengths[i]) if items[i][1][k]] for i in g], padded)
        n = len(loss_pos)
        rows.append(Row(input_ids=ids, position_ids=pos, loss_pos=loss_pos, targets=targets, adv=torch.ones(n),
                        role=torch.ones(n, dtype=torch.long), seg=torch.zeros(n, dtype=torch.long),
                        rollout_logp=torch.full((n,), float("nan")), samples=list(g),
                        real_tokens=sum(lengths[i] for i in g)))
    return rows


# --------------------------------------------------------------------------- training
def _out_of_time(acc, projected_s: float, limit_s: float) -> bool:
    """Whether any rank would run past ``limit_s`` (all ranks stop together)."""
    late = torch.tensor([1.0 if projected_s > limit_s else 0.0], device=acc.device)
    return float(acc.reduce(late, reduction="sum").item()) > 0


def train_sft(cfg, out: Optional[str] = None, echo=None, resume: bool = False) -> dict:
    """Load, filter, pack and train; saves ``OUT/model``, ``OUT/metrics.jsonl`` and a checkpoint
    after every epoch (``sft_checkpoint``); ``resume`` continues from the newest one."""
    from accelerate import Accelerator

    from ..llm.spec import resolve_model
    from . import sft_checkpoint as sck
    from .metrics_log import MetricsLog
    from .modeling import load_model, load_tokenizer, mixed_precision, trainable_parameters
    from .progress import bar as progress_bar

    s = cfg.sft
    echo = echo or (lambda msg: None)
    out_dir = Path(out or cfg.out)
    examples = load_examples(list(s.data))  # bad data fails before a model is loaded
    threshold = s.minhash_threshold if s.dedupe else 2.0  # a Jaccard index never reaches 2: nothing is a duplicate
    kept, rep = diversity_filter(examples, threshold, s.max_per_task, s.clusters, s.max_per_cluster, s.seed)
    if not kept:
        raise UsageError(f"sft.data: no usable examples ({rep.total} read, none with an assistant turn kept)")
    acc = Accelerator(mixed_precision=mixed_precision(s.bf16), cpu=not torch.cuda.is_available())
    if acc.is_main_process:
        out_dir.mkdir(parents=True, exist_ok=True)
        RunDir(out_dir).start({"kind": "train sft", "sft_model": s.model}, sandbox="none (no evaluator)")
        (out_dir / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=2))  # what --resume checks
        base = resolve_model(s.model, out_dir)
    acc.wait_for_everyone()
    if not acc.is_main_process:
        base = resolve_model(s.model, out_dir)
    torch.manual_seed(s.seed)
    tokenizer = load_tokenizer(base)
    found = sck.load(out_dir, base, s, echo) if resume else None
    if found is not None:
        state, ck_path, model = found
    else:
        state, ck_path = {"epoch": 0, "step": 0}, None
        model = load_model(base, lora_r=s.lora_r, bf16=s.bf16, grad_checkpointing=s.grad_checkpointing)
    model.train()
    opt = torch.optim.AdamW(trainable_parameters(model), lr=s.lr)
    model, opt = acc.prepare(model, opt)
    if ck_path is not None:
        sck.restore(acc, opt, ck_path)
    rows = pack_examples([encode_chat(tokenizer, e.messages) for e in kept], s.max_seq_len, s.micro_batch_layout)
    resume_step = int(state["step"]) if found is not None else None
    log = (MetricsLog(out_dir, report_to=cfg.report_to, resume_step=resume_step, config=dataclasses.asdict(cfg))
           if acc.is_main_process else None)
    roles = ", ".join(f"{k} {v['kept']}/{v['total']}" for k, v in rep.extra["by_role"].items())
    echo(f"sft: {rep.total} examples, {rep.near_duplicates} near duplicates, {rep.over_task_cap} over the "
         f"per-task cap, {rep.over_cluster_cap} over cluster caps → {rep.kept} kept ({roles}), "
         f"{len(rows)} packed rows")
    world = acc.num_processes
    per_epoch = -(-len(rows) // (s.batch_rows * world))
    loop = _Loop(s, acc, model, opt, rows, log, echo, tokenizer, out_dir, int(state["epoch"]), int(state["step"]))
    with progress_bar(per_epoch * s.epochs, loop.step, "sft", enabled=acc.is_main_process) as shown:
        loop.run(shown)
    return _finish(acc, model, tokenizer, out_dir, rep, log, rows, loop.step, loop.epochs_done, loop.last_loss)


class _Loop:
    """The epochs of SFT from ``epoch0`` (epochs already done, from a checkpoint) on; a checkpoint
    after each. The data order of the done epochs is replayed from the seed."""

    def __init__(self, s, acc, model, opt, rows, log, echo, tokenizer, out_dir, epoch0: int, step0: int):
        self.s, self.acc, self.model, self.opt, self.rows = s, acc, model, opt, rows
        self.log, self.echo, self.tokenizer, self.out_dir = log, echo, tokenizer, out_dir
        self.epoch0, self.step, self.epochs_done, self.last_loss = epoch0, step0, epoch0, float("nan")

    def run(self, shown) -> None:
        from . import sft_checkpoint as sck

        s, acc = self.s, self.acc
        rng = random.Random(s.seed)
        order = list(range(len(self.rows)))
        for _ in range(self.epoch0):  # the order the done epochs used: the next ones follow it
            rng.shuffle(order)
        started, longest = time.monotonic(), 0.0
        for epoch in range(self.epoch0, s.epochs):
            if (s.max_seconds and epoch > self.epoch0
                    and _out_of_time(acc, time.monotonic() - started + longest, s.max_seconds)):
                self.echo(f"sft: stopped after {epoch} of {s.epochs} epochs (sft.max_seconds {s.max_seconds:g})")
                break
            t_epoch = time.monotonic()
            rng.shuffle(order)
            self._epoch(epoch, order, shown)
            longest, self.epochs_done = max(longest, time.monotonic() - t_epoch), epoch + 1
            self.echo(f"sft epoch {epoch + 1}/{s.epochs}: loss {self.last_loss:.4f}")
            sck.save(acc, self.model, self.opt, self.tokenizer, self.out_dir, epoch + 1, self.step, s.seed)

    def _epoch(self, epoch: int, order: list[int], shown) -> None:
        from .modeling import trainable_parameters
        from .update import row_logprobs

        s, acc, model, opt, rows = self.s, self.acc, self.model, self.opt, self.rows
        world, rank = acc.num_processes, acc.process_index
        per_step = s.batch_rows * world
        for start in range(0, len(order), per_step):
            chunk = [rows[i] for i in order[start:start + per_step]]
            mine = chunk[rank::world] or [chunk[0]]
            weight = 1.0 if chunk[rank::world] else 0.0  # a rank without rows contributes nothing
            local = sum(len(r.targets) for r in mine) * weight
            denom = float(acc.reduce(torch.tensor([local], device=acc.device), reduction="sum").item())
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            total = 0.0
            for i, row in enumerate(mine):
                ctx = acc.no_sync(model) if (world > 1 and i < len(mine) - 1) else contextlib.nullcontext()
                with ctx:
                    lp = row_logprobs(model, row, acc.device, 1.0, "fused")  # no logits tensor, as in RL
                    loss = -lp.sum() * weight / max(denom, 1.0) * world
                    acc.backward(loss)
                total += float(-lp.detach().sum()) * weight
            acc.clip_grad_norm_(trainable_parameters(model), 1.0)
            opt.step()
            self.step += 1
            self.last_loss = (float(acc.reduce(torch.tensor([total], device=acc.device), reduction="sum").item())
                              / max(denom, 1))
            if self.log is not None:
                self.log.write(self.step, {"epoch": epoch, "loss": self.last_loss, "tokens": denom,
                                           "step_s": time.perf_counter() - t0})
            shown(self.step, f"epoch {epoch + 1}/{s.epochs} loss {self.last_loss:.4f}")


def _finish(acc, model, tokenizer, out_dir, rep, log, rows, step, epochs_done, last_loss) -> dict:
    """Save OUT/model and the filter report; the summary of the run."""
    from .modeling import save_model

    model_dir = out_dir / "model"
    unwrapped = acc.unwrap_model(model)
    state_dict = None if hasattr(unwrapped, "peft_config") else acc.get_state_dict(model)
    if acc.is_main_process:
        save_model(unwrapped, tokenizer, model_dir, state_dict=state_dict)
        (out_dir / "sft_filter.json").write_text(json.dumps(rep.__dict__, indent=1))
        log.close()
    acc.wait_for_everyone()
    return {"samples": rep.kept, "rows": len(rows), "steps": step, "epochs": epochs_done, "loss": last_loss, "model_dir": str(model_dir),
            "filter": rep.__dict__}
