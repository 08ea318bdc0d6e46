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
- the diversity filter (``diversity_filter``), run for each role on its own: near-duplicate
  removal (LSH at ``minhash_threshold`` proposes candidates, the exact Jaccard of the
  shingle sets decides) on what that role produced — the code of a policy answer, the task
  and picked skill names of a selection, and each proposed skill of a summary (description
  and content as lower-cased words with digits folded, the name left out, so reworded or
  renamed copies of one skill count as the same skill: skill collapse) — then a cap per task
  (best score first) and optional k-means clustering of hashed shingle features with a cap
  per cluster;
- tokenization with a loss mask on the trained assistant tokens only (``encode_chat``), micro-batches of
  ``max_seq_len`` tokens (right-padded (B, L) batches, or packed rows with position ids
  restarting per example: ``sft.micro_batch_layout``), and training
  (AdamW, LoRA option, bf16 where supported, gradient checkpointing, accelerate; token
  log-probs straight from the output head, no logits tensor, as the RL update takes them).

Does not cover: RL (``trainer.py``) or producing trajectories (``rollout/``). The filter's
design is our own (the paper names a diversity filter, the public release ships none).
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from ..errors import UsageError
from ..records import TaskGroup, Turn
from .advantages import scheme_rewards
from .sequences import Row, assemble, first_fit, length_groups

_CODE_RE = re.compile(r"```(?:python|py|cuda|cpp|c\+\+)?\s*\n(.*?)```", re.S)
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_WORD_RE = re.compile(r"\w+")
SFT_ROLES = ("policy", "select", "summary")


@dataclass
class Example:
    messages: list[dict]
    task: str = ""
    score: float = 0.0  # higher is kept first by the per-task cap (e.g. speedup)
    source: str = ""
    role: str = "policy"  # the agent it trains: "policy" | "select" | "summary"

    @property
    def answer(self) -> str:
        """The last assistant message: the one an example from a trajectory trains on."""
        return next((m["content"] for m in reversed(self.messages) if m.get("role") == "assistant"), "") or ""

    @property
    def code(self) -> str:
        last = self.answer
        blocks = _CODE_RE.findall(last)
        return "\n".join(blocks) if blocks else last


@dataclass
class FilterReport:
    total: int = 0
    near_duplicates: int = 0
    over_task_cap: int = 0
    over_cluster_cap: int = 0
    kept: int = 0
    extra: dict = field(default_factory=dict)


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
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise UsageError(f"{path}:{n}: not valid JSON") from None
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


# --------------------------------------------------------------------------- diversity
def _shingles(code: str, n: int = 5) -> set[str]:
    toks = _TOKEN_RE.findall(code)
    if len(toks) < n:
        return {" ".join(toks)} if toks else set()
    return {" ".join(toks[i:i + n]) for i in range(len(toks) - n + 1)}


def _features(code: str, dim: int = 512) -> torch.Tensor:
    import zlib

    v = torch.zeros(dim)
    for s in _shingles(code, 3):
        v[zlib.crc32(s.encode()) % dim] += 1.0
    return v / v.norm().clamp(min=1e-9)


def kmeans(x: torch.Tensor, k: int, seed: int = 0, iters: int = 20) -> torch.Tensor:
    """x (N, D) → cluster id (N,) by Lloyd's algorithm from seeded distinct starting points."""
    g = torch.Generator().manual_seed(seed)
    k = min(k, x.shape[0])
    centers = x[torch.randperm(x.shape[0], generator=g)[:k]].clone()  # (k, D)
    assign = torch.zeros(x.shape[0], dtype=torch.long)
    for _ in range(iters):
        assign = torch.cdist(x, centers).argmin(dim=1)  # (N,)
        for c in range(k):
            members = x[assign == c]
            if len(members):
                centers[c] = members.mean(dim=0)
    return assign


def _skill_shingles(skill: dict, n: int = 3) -> set[str]:
    """Word n-grams of a skill's description and content (lower case, digits folded to 0,
    name left out): reworded, renumbered or renamed copies of one skill stay close."""
    text = f"{skill.get('description') or ''}\n{skill.get('content') or ''}"
    words = [re.sub(r"\d+", "0", w.lower()) for w in _WORD_RE.findall(text)]
    if len(words) < n:
        return {" ".join(words)} if words else set()
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def _selected_names(text: str) -> list[str]:
    from ..agents.extract import find_tool_call

    args = find_tool_call(text, "select_skills", "selected_skills") or {}
    picks = args.get("selected_skills")
    picks = [picks] if isinstance(picks, dict) else picks if isinstance(picks, list) else []
    return sorted({str(p.get("name") if isinstance(p, dict) else p) for p in picks})


def _summary_skills(text: str) -> list[dict]:
    from ..agents.summary import parse_summary

    return [sk.to_dict() for sk in parse_summary(text, max_new_skills=1 << 20).skills]


def fingerprints(e: Example) -> list[set[str]]:
    """What the near-duplicate check compares, per role: one shingle set for a policy answer
    (its code) and for a selection (task and picked names), one per proposed skill for a
    summary (its whole answer when no skill parses)."""
    if e.role == "select":
        return [{f"task:{e.task}"} | {f"pick:{n}" for n in _selected_names(e.answer)}]
    if e.role == "summary":
        skills = _summary_skills(e.answer)
        if skills:
            return [_skill_shingles(sk) for sk in skills]
        return [_skill_shingles({"content": e.answer})]
    return [_shingles(e.code)]


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if (a or b) else 1.0


def _drop_near_duplicates(examples: list[Example], order: list[int], threshold: float, seed: int,
                          num_perm: int) -> tuple[list[int], int]:
    """Walk ``order`` (best first); drop an example when any of its fingerprints is a near
    duplicate (Jaccard ≥ threshold) of a fingerprint of an example kept before it."""
    from datasketch import MinHash, MinHashLSH

    # LSH proposes candidates at a looser threshold; the exact Jaccard of the sets decides.
    lsh = MinHashLSH(threshold=min(threshold, 0.7), num_perm=num_perm)
    kept_sets: dict[str, set[str]] = {}
    kept: list[int] = []
    dropped = 0
    for i in order:
        fps = fingerprints(examples[i])
        mhs = []
        for fp in fps:
            mh = MinHash(num_perm=num_perm, seed=seed)
            for sh in fp:
                mh.update(sh.encode("utf-8"))
            mhs.append(mh)
        if any(_jaccard(fp, kept_sets[k]) >= threshold for fp, mh in zip(fps, mhs) for k in lsh.query(mh)):
            dropped += 1
            continue
        for j, (fp, mh) in enumerate(zip(fps, mhs)):
            key = f"{i}:{j}"
            kept_sets[key] = fp
            lsh.insert(key, mh)
        kept.append(i)
    return kept, dropped


def _role_filter(examples: list[Example], threshold: float, max_per_task: int, clusters: int,
                 max_per_cluster: int, seed: int, num_perm: int) -> tuple[list[int], FilterReport]:
    """The filter for examples of one role: near duplicates, per-task cap, cluster cap."""
    rep = FilterReport(total=len(examples))
    order = sorted(range(len(examples)), key=lambda i: -examples[i].score)  # best first, stable
    kept, rep.near_duplicates = _drop_near_duplicates(examples, order, threshold, seed, num_perm)
    per_task: dict[str, int] = {}
    capped = []
    for i in kept:
        key = examples[i].task
        if max_per_task and key and per_task.get(key, 0) >= max_per_task:
            rep.over_task_cap += 1
            continue
        per_task[key] = per_task.get(key, 0) + 1
        capped.append(i)
    if clusters > 0 and len(capped) > 1:
        feats = torch.stack([_features(" ".join(sorted(set().union(*fingerprints(examples[i])))))
                             if examples[i].role != "policy" else _features(examples[i].code) for i in capped])
        assign = kmeans(feats, clusters, seed).tolist()
        cap = max_per_cluster or math.ceil(len(capped) / min(clusters, len(capped)))
        per_cluster: dict[int, int] = {}
        final = []
        for i, c in zip(capped, assign):
            if per_cluster.get(c, 0) >= cap:
                rep.over_cluster_cap += 1
                continue
            per_cluster[c] = per_cluster.get(c, 0) + 1
            final.append(i)
        rep.extra["cluster_sizes"] = sorted(per_cluster.values(), reverse=True)
        capped = final
    rep.kept = len(capped)
    return capped, rep


def diversity_filter(examples: list[Example], threshold: float = 0.85, max_per_task: int = 8,
                     clusters: int = 0, max_per_cluster: int = 0, seed: int = 0,
                     num_perm: int = 128) -> tuple[list[Example], FilterReport]:
    """Each role on its own: near-duplicate removal (see ``fingerprints``), a per-task cap,
    optional cluster caps. The report sums over roles; ``extra["by_role"]`` has each role's."""
    rep = FilterReport(total=len(examples))
    chosen: list[int] = []
    by_role: dict[str, dict] = {}
    for role in sorted({e.role for e in examples}):
        idx = [i for i, e in enumerate(examples) if e.role == role]
        kept, r = _role_filter([examples[i] for i in idx], threshold, max_per_task, clusters, max_per_cluster,
                               seed, num_perm)
        chosen += [idx[j] for j in kept]
        rep.near_duplicates += r.near_duplicates
        rep.over_task_cap += r.over_task_cap
        rep.over_cluster_cap += r.over_cluster_cap
        by_role[role] = r.__dict__
    rep.kept = len(chosen)
    rep.extra["by_role"] = by_role
    return [examples[i] for i in sorted(chosen)], rep


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
def train_sft(cfg, out: Optional[str] = None, echo=None) -> dict:
    """Load, filter, pack and train; saves ``OUT/model`` and ``OUT/metrics.jsonl``."""
    from accelerate import Accelerator

    from .metrics_log import MetricsLog
    from .modeling import load_model, load_tokenizer, mixed_precision, save_model, trainable_parameters
    from ..llm.tiny import resolve_model
    from .update import row_logprobs

    s = cfg.sft
    echo = echo or (lambda msg: None)
    out_dir = Path(out or cfg.out)
    examples = load_examples(list(s.data))  # bad data fails before a model is loaded
    kept, rep = diversity_filter(examples, s.minhash_threshold, s.max_per_task, s.clusters, s.max_per_cluster,
                                 s.seed)
    if not kept:
        raise UsageError(f"sft.data: no usable examples ({rep.total} read, none with an assistant turn kept)")
    acc = Accelerator(mixed_precision=mixed_precision(s.bf16), cpu=not torch.cuda.is_available())
    if acc.is_main_process:
        out_dir.mkdir(parents=True, exist_ok=True)
        base = resolve_model(s.model, out_dir)
    acc.wait_for_everyone()
    if not acc.is_main_process:
        base = resolve_model(s.model, out_dir)
    torch.manual_seed(s.seed)
    tokenizer = load_tokenizer(base)
    model = load_model(base, lora_r=s.lora_r, bf16=s.bf16, grad_checkpointing=s.grad_checkpointing)
    model.train()
    opt = torch.optim.AdamW(trainable_parameters(model), lr=s.lr)
    model, opt = acc.prepare(model, opt)
    rows = pack_examples([encode_chat(tokenizer, e.messages) for e in kept], s.max_seq_len, s.micro_batch_layout)
    log = MetricsLog(out_dir) if acc.is_main_process else None
    roles = ", ".join(f"{k} {v['kept']}/{v['total']}" for k, v in rep.extra["by_role"].items())
    echo(f"sft: {rep.total} examples, {rep.near_duplicates} near duplicates, {rep.over_task_cap} over the "
         f"per-task cap, {rep.over_cluster_cap} over cluster caps → {rep.kept} kept ({roles}), "
         f"{len(rows)} packed rows")
    rng = random.Random(s.seed)
    step, last_loss = 0, float("nan")
    world, rank = acc.num_processes, acc.process_index
    for epoch in range(s.epochs):
        order = list(range(len(rows)))
        rng.shuffle(order)
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
            step += 1
            last_loss = float(acc.reduce(torch.tensor([total], device=acc.device), reduction="sum").item()) / max(denom, 1)
            if log is not None:
                log.write(step, {"epoch": epoch, "loss": last_loss, "tokens": denom,
                                 "step_s": time.perf_counter() - t0})
        echo(f"sft epoch {epoch + 1}/{s.epochs}: loss {last_loss:.4f}")
    model_dir = out_dir / "model"
    unwrapped = acc.unwrap_model(model)
    state_dict = None if hasattr(unwrapped, "peft_config") else acc.get_state_dict(model)
    if acc.is_main_process:
        save_model(unwrapped, tokenizer, model_dir, state_dict=state_dict)
        (out_dir / "sft_filter.json").write_text(json.dumps(rep.__dict__, indent=1))
        log.close()
    acc.wait_for_everyone()
    return {"samples": rep.kept, "rows": len(rows), "steps": step, "loss": last_loss, "model_dir": str(model_dir),
            "filter": rep.__dict__}
