"""Lexical retrieval over the skill library: a code-aware tokenizer and a bm25s index.

Covers: ``tokenize`` (identifiers kept whole and split: ``tl.load`` gives
``tl.load``, ``tl``, ``load``; camelCase and snake_case split; CUDA/Triton
keywords such as ``__syncthreads`` and ``tl.dot`` kept; nothing stemmed; English
stop words dropped); ``SkillIndex`` (bm25s over the fields name, tags,
description and content, name and tags weighted up; top-k with scope and tag
filters; a seeded random sample of the library when BM25 matches nothing);
``task_query`` (the query for a task: the torch ops its source calls, the
concepts those ops imply, its op type and level, and the words of its source).

Does not cover: the selection agent's rerank (``select``) or where skills live
(``store``).
"""

from __future__ import annotations

import ast
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Optional

import numpy as np

from ..pysource import parse as parse_source
from ..records import Skill, Task

_IDENT_RE = re.compile(r"@?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_CAMEL_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+[a-z]*")

STOP_WORDS = frozenset("""
a an and are as at be been but by can do does for from has have if in into is it its
of on or so such that the their then there these this those to was were when which while
will with without you your we our not no than too very also only just more most each
same other any all both up out over under about after before because how what where why
""".split())

# Words that appear in nearly every problem file and say nothing about the optimization.
CODE_STOP_WORDS = frozenset("""
self def return class import from super init __init__ forward model module torch nn
get_inputs get_init_inputs inputs outputs args kwargs none true false float int
python x y tensor shape size dim batch_size
""".split())

# What a torch op in a problem suggests about the kernel that replaces it.
OP_CONCEPTS: dict[str, str] = {
    "matmul": "matmul gemm tl.dot tiled tile epilogue autotune block_size",
    "mm": "matmul gemm tl.dot tiled tile autotune block_size",
    "bmm": "batched matmul gemm tl.dot tile",
    "linear": "matmul gemm linear tl.dot epilogue bias fuse autotune",
    "addmm": "matmul gemm bias epilogue tl.dot",
    "einsum": "matmul gemm tl.dot",
    "conv1d": "convolution conv implicit gemm tl.dot autotune",
    "conv2d": "convolution conv implicit gemm tl.dot im2col autotune",
    "conv3d": "convolution conv implicit gemm tl.dot",
    "convtranspose2d": "convolution transposed conv gemm",
    "batchnorm1d": "batchnorm normalization fold mean variance",
    "batchnorm2d": "batchnorm normalization fold conv mean variance",
    "layernorm": "layernorm normalization mean variance welford reduction row accumulate fp32",
    "groupnorm": "groupnorm normalization mean variance welford reduction",
    "instancenorm2d": "normalization mean variance welford reduction",
    "rmsnorm": "rmsnorm normalization reduction row",
    "softmax": "softmax exp max reduction row online mask tail",
    "log_softmax": "softmax log exp reduction row online",
    "cross_entropy": "cross entropy softmax log reduction row",
    "relu": "elementwise activation epilogue fuse memory_bound coalescing",
    "gelu": "elementwise activation gelu tanh erf epilogue fuse",
    "silu": "elementwise activation sigmoid epilogue fuse",
    "sigmoid": "elementwise activation sigmoid exp fuse",
    "tanh": "elementwise activation tanh exp fuse",
    "hardtanh": "elementwise activation clamp fuse",
    "leaky_relu": "elementwise activation fuse",
    "elu": "elementwise activation exp fuse",
    "softplus": "elementwise activation exp log fuse",
    "dropout": "elementwise mask",
    "sum": "reduction sum accumulate fp32 precision",
    "mean": "reduction mean accumulate fp32 precision",
    "max": "reduction max mask tail other",
    "min": "reduction min mask tail other",
    "argmax": "reduction argmax mask tail other",
    "argmin": "reduction argmin mask tail other",
    "prod": "reduction product",
    "cumsum": "scan prefix sum cumsum",
    "norm": "reduction norm sum square accumulate fp32",
    "var": "reduction variance welford",
    "std": "reduction variance welford",
    "max_pool2d": "pooling max window mask padding",
    "maxpool2d": "pooling max window mask padding",
    "avg_pool2d": "pooling average window",
    "avgpool2d": "pooling average window",
    "adaptive_avg_pool2d": "pooling average reduction",
    "transpose": "strides transpose layout",
    "t": "strides transpose layout",
    "abs": "elementwise memory_bound coalescing",
    "sqrt": "elementwise",
    "permute": "strides transpose layout",
    "contiguous": "strides layout copy",
    "clamp": "elementwise clamp fuse",
    "add": "elementwise fuse",
    "mul": "elementwise fuse",
    "exp": "elementwise exp",
    "scaled_dot_product_attention": "attention softmax matmul online flash",
    "multiheadattention": "attention softmax matmul online flash",
}


def _split_identifier(ident: str) -> list[str]:
    parts: list[str] = []
    for piece in re.split(r"[._]+", ident):
        if not piece:
            continue
        sub = _CAMEL_RE.findall(piece)
        parts.append(piece.lower())
        if len(sub) > 1:
            parts.extend(s.lower() for s in sub)
    return parts


def tokenize(text: str, drop_code_stop_words: bool = False) -> list[str]:
    """Code-aware tokens of ``text`` (lowercase; whole identifiers and their parts)."""
    out: list[str] = []
    for m in _IDENT_RE.finditer(text or ""):
        raw = m.group(0).lstrip("@")
        whole = raw.lower()
        if whole in STOP_WORDS or (drop_code_stop_words and whole in CODE_STOP_WORDS):
            continue
        out.append(whole)
        bare = whole.strip("_")
        if bare != whole and bare and "." not in bare:
            out.append(bare)
        if "." in raw or "_" in raw.strip("_") or any(c.isupper() for c in raw[1:]):
            for part in _split_identifier(raw):
                if part != whole and part not in STOP_WORDS and len(part) > 1:
                    if drop_code_stop_words and part in CODE_STOP_WORDS:
                        continue
                    out.append(part)
    return out


def skill_tokens(skill: Skill) -> list[str]:
    """Index tokens of one skill: name x3, tags x2, description x2, content x1."""
    name = tokenize(skill.name.replace("_", " ")) + tokenize(skill.name)
    tags = tokenize(" ".join(skill.tags))
    desc = tokenize(skill.description)
    return name * 3 + tags * 2 + desc * 2 + tokenize(skill.content)


# --------------------------------------------------------------------------- task → query
def torch_ops(source: str) -> list[str]:
    """Names of the torch ops and modules a problem calls (``Conv2d``, ``relu``, ``sum``)."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return sorted(set(m.group(1) for m in re.finditer(r"\b(?:torch|nn|F)\.(?:\w+\.)*(\w+)\s*\(", source)))
    ops: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute):
                ops.add(f.attr)
            elif isinstance(f, ast.Name) and f.id[:1].isupper():
                ops.add(f.id)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            ops.add("matmul")
        elif isinstance(node, ast.Attribute) and node.attr in ("T", "mT", "mH"):
            ops.add("transpose")
    return sorted(o for o in ops if o not in ("__init__", "super", "Model", "randn", "rand", "zeros",
                                                 "ones", "tensor", "empty", "manual_seed", "cuda", "to"))


def task_query(task: Task) -> str:
    """The BM25 query for a task: its ops (twice), their concepts, op type, level, source words."""
    ops = torch_ops(task.source)
    concepts = [OP_CONCEPTS[o.lower()] for o in ops if o.lower() in OP_CONCEPTS]
    level = f"level{task.level}" if task.level else ""
    if task.level >= 2:
        concepts.append("fusion fuse epilogue")
    if task.level >= 3:
        concepts.append("network fusion")
    words = " ".join(tokenize(task.source, drop_code_stop_words=True))
    return " ".join([" ".join(ops), " ".join(ops), " ".join(concepts), task.op_type or "", level, words])


# --------------------------------------------------------------------------- index
class SkillIndex:
    """A bm25s index over a fixed list of skills.

    ``search`` returns up to ``k`` skills by descending BM25 score among those
    passing the filters; when no skill shares a token with the query it returns
    a random sample (``seed`` makes it reproducible)."""

    def __init__(self, skills: Sequence[Skill], k1: float = 1.2, b: float = 0.75):
        import bm25s

        self.skills = list(skills)
        self._retriever = None
        if not self.skills:
            return
        corpus = [skill_tokens(s) or ["_empty_"] for s in self.skills]
        r = bm25s.BM25(k1=k1, b=b, method="lucene")
        r.index(corpus, show_progress=False)
        self._retriever = r
        self._vocab = r.vocab_dict
        self._data = np.asarray(r.scores["data"])
        self._indices = np.asarray(r.scores["indices"])
        self._indptr = np.asarray(r.scores["indptr"])
        self._scopes = np.array([s.scope for s in self.skills], dtype=object)

    def __len__(self) -> int:
        return len(self.skills)

    def _query_ids(self, query: str, max_repeat: int = 2) -> np.ndarray:
        counts = Counter(t for t in tokenize(query) if t in self._vocab)
        ids: list[int] = []
        for tok, c in counts.items():
            tid = self._vocab[tok]
            if tid + 1 < len(self._indptr):
                ids.extend([tid] * min(c, max_repeat))
        return np.asarray(ids, dtype=np.int64)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every skill for ``query`` (zeros where nothing matches)."""
        n = len(self.skills)
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        ids = self._query_ids(query)
        if ids.size == 0:
            return np.zeros(n, dtype=np.float32)
        scores = np.zeros(n, dtype=np.float32)
        starts, ends = self._indptr[ids], self._indptr[ids + 1]
        for a, b in zip(starts.tolist(), ends.tolist()):  # sum each token's postings (as bm25s does)
            if b > a:
                np.add.at(scores, self._indices[a:b], self._data[a:b])
        return scores

    def _mask(self, scope: Optional[str], tags: Optional[Iterable[str]]) -> Optional[np.ndarray]:
        if scope is None and not tags:
            return None
        keep = np.ones(len(self.skills), dtype=bool)
        if scope is not None:
            if scope.endswith("/") or scope == "task_specific":
                pre = scope.rstrip("/") + "/"
                keep &= np.array([s.startswith(pre) for s in self._scopes])
            else:
                keep &= self._scopes == scope
        if tags:
            want = {t.lower() for t in tags}
            keep &= np.array([bool(want & {t.lower() for t in s.tags}) for s in self.skills])
        return keep

    def search_scored(self, query: str, k: int = 20, scope: Optional[str] = None,
                      tags: Optional[Iterable[str]] = None, seed: Optional[int] = 0
                      ) -> list[tuple[Skill, float]]:
        """``[(skill, score), ...]``; score 0.0 marks the random-sample fallback."""
        if not self.skills or k <= 0:
            return []
        mask = self._mask(scope, tags)
        scores = self.scores(query)
        if mask is not None:
            scores = np.where(mask, scores, 0.0)
        hit = np.flatnonzero(scores > 0)
        if hit.size == 0:
            pool = np.flatnonzero(mask) if mask is not None else np.arange(len(self.skills))
            rng = random.Random(seed)
            pick = rng.sample(list(pool), min(k, pool.size))
            return [(self.skills[i], 0.0) for i in pick]
        if hit.size > k:
            part = np.argpartition(-scores[hit], k - 1)[:k]
            hit = hit[part]
        order = hit[np.lexsort((hit, -scores[hit]))]
        return [(self.skills[i], float(scores[i])) for i in order]

    def search(self, query: str, k: int = 20, scope: Optional[str] = None,
               tags: Optional[Iterable[str]] = None, seed: Optional[int] = 0) -> list[Skill]:
        return [s for s, _ in self.search_scored(query, k=k, scope=scope, tags=tags, seed=seed)]
