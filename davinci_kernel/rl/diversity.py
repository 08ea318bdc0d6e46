"""SFT examples and the diversity filter that runs on them before training.

Covers: ``Example`` (one chat conversation with its task, score, source and the agent it
trains), ``FilterReport``, and ``diversity_filter``, run for each role on its own:
near-duplicate removal (MinHash LSH at the threshold proposes candidates, the exact Jaccard
of the shingle sets decides) on what that role produced — the code of a policy answer, the
task and picked skill names of a selection, and each proposed skill of a summary
(description and content as lower-cased words with digits folded, the name left out, so
reworded or renamed copies of one skill count as the same skill: skill collapse) — then a
cap per task (best score first) and optional k-means clustering of hashed shingle features
with a cap per cluster. The design is our own: the paper names a diversity filter, its
public release ships none.

Does not cover: where examples come from, tokenization or training (``sft.py``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

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
