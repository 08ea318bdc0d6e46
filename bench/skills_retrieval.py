"""Skill retrieval benchmark: latency by library size and quality on labeled tasks.

Latency: libraries of 100, 1k, 10k and 100k skills (the seed library plus
synthetic distractors built from the seed vocabulary and example code), queried
with the task queries of 44 labeled tasks; top-20 per query. Side by side in one
run: our scorer over the bm25s index (what ``SkillIndex.search`` does), bm25s's
own ``retrieve``, and rank_bm25 (``BM25Okapi``), all on the same tokens.

Quality: for each labeled task (bench/skills_tasks.py), recall@20 of BM25 and
recall@3 of BM25 alone vs. BM25 + rerank, where the rerank is a test double that
orders the 20 numbered candidates by the hand-made relevance grades and answers
with a ``select_skills`` call parsed by ``agents.selection.parse_selection``.

Writes bench/results/skills_retrieval.json and skills_retrieval.png.
Usage: python bench/skills_retrieval.py [--sizes 100,1000,10000,100000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from skills_tasks import labeled_tasks  # noqa: E402

from davinci_kernel.agents.selection import parse_selection  # noqa: E402
from davinci_kernel.config import SkillsConfig  # noqa: E402
from davinci_kernel.records import Skill  # noqa: E402
from davinci_kernel.skills.bm25 import SkillIndex, skill_tokens, task_query, tokenize  # noqa: E402
from davinci_kernel.skills.markdown import example_blocks  # noqa: E402
from davinci_kernel.skills.seed_build import load_sources  # noqa: E402
from davinci_kernel.skills.select import candidates_for, format_candidates  # noqa: E402


def seed_skills() -> list[Skill]:
    return [s for s, _, _ in load_sources()]


def distractors(n: int, seeds: list[Skill], rng: random.Random) -> list[Skill]:
    """Skills that compete for the same words: prose and tags resampled from the
    seed library, a slice of a random seed example as code."""
    words = [w for s in seeds for w in (s.description + " " + s.content).split() if w.isalpha()]
    tags = sorted({t for s in seeds for t in s.tags})
    codes = [code.splitlines() for s in seeds for _, code in example_blocks(s.content)]
    out = []
    for i in range(n):
        c = rng.choice(codes)
        start = rng.randrange(max(1, len(c) - 12))
        code = "\n".join(c[start:start + 12])
        desc = " ".join(rng.choices(words, k=18))
        content = (f"## Motivation\n{' '.join(rng.choices(words, k=40))}\n## Key Idea\n"
                   f"{' '.join(rng.choices(words, k=50))}\n## Example\n```python\n{code}\n```\n")
        name = f"synthetic_{rng.choice(tags).strip('_').replace('.', '_')}_{i}".lower()
        out.append(Skill(name=name, description=desc, tags=rng.sample(tags, 4), content=content))
    return out


# Kernel topics the seed library does not cover: what other skills of a grown library are about.
OFF_TOPICS = [
    "prefix scan cumsum blelloch", "radix sort keys bitonic", "histogram bins counting", "embedding lookup gather rows",
    "rotary position embedding rope", "int4 weight dequantization packing", "fft butterfly twiddle", "topk selection heap",
    "scatter index_add segments", "dropout philox random seed", "bilinear upsample interpolate", "reflection pad border",
    "kv cache paged blocks decode", "sparse csr spmv rows", "depthwise separable channel", "grid sample coordinates",
    "triangular solve trsm", "cholesky factorization panel", "lstm gates recurrence", "gru cell hidden state",
    "nms boxes iou", "roi align bins", "pixel shuffle channels", "one hot encoding classes", "mixture experts routing",
    "beam search scores", "ctc loss alignment", "kl divergence distributions", "triplet margin distance", "hinge loss margin",
]


def off_topic(n: int, seeds: list[Skill], rng: random.Random) -> list[Skill]:
    """Coherent skills on other topics that share the generic kernel vocabulary and code."""
    generic = ("kernel triton block program tile load store mask grid launch memory bandwidth registers "
               "warps stride offsets contiguous fp32 tensor output input cuda speedup").split()
    codes = [code.splitlines() for s in seeds for _, code in example_blocks(s.content)]
    out = []
    for i in range(n):
        topic = OFF_TOPICS[i % len(OFF_TOPICS)].split()
        c = rng.choice(codes)
        start = rng.randrange(max(1, len(c) - 12))
        words = lambda k, topic=topic: " ".join(rng.choice(topic) if rng.random() < 0.35 else rng.choice(generic)  # noqa: E731
                                   for _ in range(k))
        content = (f"## Motivation\n{words(40)}\n## Key Idea\n{words(50)}\n## Example\n```python\n"
                   + "\n".join(c[start:start + 12]) + "\n```\n")
        out.append(Skill(name=f"{topic[0]}_{topic[1]}_{i}", description=words(18),
                         tags=[topic[0], topic[1], rng.choice(generic)], content=content))
    return out


def library(size: int, rng_seed: int = 0, kind: str = "off_topic") -> list[Skill]:
    seeds = seed_skills()
    make = off_topic if kind == "off_topic" else distractors
    return seeds + make(max(0, size - len(seeds)), seeds, random.Random(rng_seed))


def _median_ms(fn, queries, repeat=1) -> float:
    times = []
    for _ in range(repeat):
        for q in queries:
            t0 = time.perf_counter()
            fn(q)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def latency(size: int, queries: list[str], rank_bm25_queries: int) -> dict:
    import bm25s
    from rank_bm25 import BM25Okapi

    skills = library(size)
    t0 = time.perf_counter()
    corpus = [skill_tokens(s) for s in skills]
    tok_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    idx = SkillIndex(skills)
    build_s = time.perf_counter() - t0
    idx.search(queries[0], k=20)  # warm
    ours = _median_ms(lambda q: idx.search(q, k=20), queries, repeat=3)

    retr: bm25s.BM25 = idx._retriever

    def bm25s_retrieve(q):
        toks = [t for t in tokenize(q) if t in idx._vocab] or [""]
        return retr.retrieve([toks], k=min(20, len(skills)), show_progress=False, n_threads=1)

    bm25s_retrieve(queries[0])
    native = _median_ms(bm25s_retrieve, queries, repeat=1)

    t0 = time.perf_counter()
    rb = BM25Okapi(corpus)
    rb_build = time.perf_counter() - t0

    def rank_bm25_top20(q):
        sc = rb.get_scores(tokenize(q))
        k = min(20, len(sc))
        top = np.argpartition(-sc, k - 1)[:k]
        return top[np.argsort(-sc[top])]

    rb_ms = _median_ms(rank_bm25_top20, queries[:rank_bm25_queries], repeat=1)
    # Agreement of the two BM25 variants' top-20 (different idf/normalisation details).
    overlap = statistics.mean(
        len({s.name for s in idx.search(q, k=20)} & {skills[i].name for i in rank_bm25_top20(q)}) / 20
        for q in queries[:rank_bm25_queries])
    return {"size": len(skills), "tokenize_s": round(tok_s, 3), "index_build_s": round(build_s, 3),
            "search_ms_median": round(ours, 4), "bm25s_retrieve_ms_median": round(native, 4),
            "rank_bm25_ms_median": round(rb_ms, 3), "rank_bm25_build_s": round(rb_build, 3),
            "rank_bm25_queries": rank_bm25_queries, "top20_overlap_with_rank_bm25": round(overlap, 3)}


class _Lib:
    def __init__(self, skills):
        self._skills = skills

    def all(self, step=None):
        return self._skills


def quality(size: int, kind: str = "off_topic") -> dict:
    skills = library(size, kind=kind)
    store = _Lib(skills)
    rows = []
    for task, rel in labeled_tasks():
        def rerank(prompt, rel=rel):  # test double: order by hand-made relevance grade, keep ≤ 3
            listed = [ln.split(" ", 2)[1] for ln in prompt.splitlines()]
            ranked = sorted((n for n in listed if rel.get(n, 0) > 0), key=lambda n: (-rel[n], listed.index(n)))
            return {"name": "select_skills",
                    "arguments": {"think": "", "selected_skills": [{"name": n, "reason": "relevant"}
                                                                    for n in ranked[:3]]}}

        cfg = SkillsConfig()
        cands = candidates_for(task, store, cfg)
        picked = parse_selection(rerank(format_candidates(cands)), cands, cfg.max_selected).names
        top20 = [s.name for s in cands]
        relevant = set(rel)
        best = {n for n, g in rel.items() if g == 2}
        k3 = min(3, len(relevant))
        rows.append({
            "task": task.name,
            "recall@20": len(relevant & set(top20)) / len(relevant),
            "recall@3_bm25": len(relevant & set(top20[:3])) / k3,
            "recall@3_rerank": len(relevant & set(picked)) / k3,
            "primary_hit@3_bm25": bool(best & set(top20[:3])),
            "primary_hit@3_rerank": bool(best & set(picked)),
            "missed@20": sorted(relevant - set(top20)),
        })
    mean = lambda key: round(statistics.mean(float(r[key]) for r in rows), 4)  # noqa: E731
    return {"size": len(skills), "distractors": kind, "tasks": len(rows), "pairs": sum(len(r) for _, r in labeled_tasks()),
            "recall@20_bm25": mean("recall@20"), "recall@20_bm25_rerank": mean("recall@20"),
            "recall@3_bm25": mean("recall@3_bm25"), "recall@3_bm25_rerank": mean("recall@3_rerank"),
            "primary_hit@3_bm25": mean("primary_hit@3_bm25"),
            "primary_hit@3_bm25_rerank": mean("primary_hit@3_rerank"),
            "per_task": rows}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lat = result["latency"]
    sizes = [r["size"] for r in lat]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.loglog(sizes, [r["search_ms_median"] for r in lat], "o-", label="SkillIndex.search (bm25s index)")
    a.loglog(sizes, [r["bm25s_retrieve_ms_median"] for r in lat], "s-", label="bm25s.retrieve")
    a.loglog(sizes, [r["rank_bm25_ms_median"] for r in lat], "^-", label="rank_bm25 BM25Okapi")
    a.axhline(2.0, color="gray", ls=":", label="target 2 ms")
    a.set_xlabel("skills in library")
    a.set_ylabel("top-20 query latency, median (ms)")
    a.legend(fontsize=8)
    a.set_title("Retrieval latency (CPU)")
    q = result["quality"]
    x = np.arange(len(q))
    w = 0.2
    for j, (key, label) in enumerate([("recall@20_bm25", "recall@20 BM25"), ("recall@3_bm25", "recall@3 BM25"),
                                      ("recall@3_bm25_rerank", "recall@3 BM25+rerank")]):
        b.bar(x + (j - 1) * w, [r[key] for r in q], w, label=label)
    b.set_xticks(x, [str(r["size"]) for r in q])
    b.set_xlabel("skills in library")
    b.set_ylim(0, 1.05)
    b.axhline(0.9, color="gray", ls=":")
    b.legend(fontsize=8)
    b.set_title(f"Quality on {q[0]['tasks']} labeled tasks")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,1000,10000,100000")
    ap.add_argument("--quality-sizes", default="23,1000,10000")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "skills_retrieval.json")
    args = ap.parse_args()
    queries = [task_query(t) for t, _ in labeled_tasks()]
    lat = []
    for size in [int(s) for s in args.sizes.split(",")]:
        n_rb = len(queries) if size <= 1000 else (10 if size <= 10000 else 3)
        row = latency(size, queries, n_rb)
        lat.append(row)
        print(json.dumps(row), flush=True)
    qual, hard = [], []
    for size in [int(s) for s in args.quality_sizes.split(",")]:
        for kind, dest in (("off_topic", qual), ("resampled", hard)):
            if kind == "resampled" and size <= 23:
                continue
            q = quality(size, kind)
            dest.append(q)
            print(json.dumps({k: v for k, v in q.items() if k != "per_task"}), flush=True)
    import bm25s
    import rank_bm25  # noqa: F401

    result = {"machine": {"python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
                          "bm25s": bm25s.__version__, "numpy": np.__version__},
              "queries": len(queries), "k": 20, "latency": lat, "quality": qual, "quality_resampled_distractors": hard,
              "notes": "Latency libraries and 'quality' use off-topic distractors: coherent skills on 30 kernel "
                       "topics the seed library does not cover, sharing its generic vocabulary and example code. "
                       "'quality_resampled_distractors' is an adversarial setting: every distractor is a random "
                       "bag of the seed library's own words and tags. The rerank is a test double ranking the "
                       "20 candidates by hand-made relevance grades."}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    plot(result, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
