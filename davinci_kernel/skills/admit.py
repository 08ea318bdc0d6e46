"""Admission of new skills: filter, verify by execution, dedup, stage, commit.

Covers: ``content_filter`` (rejects skills whose content recommends torch
fallbacks, torch.compile, cuBLAS/cuDNN calls instead of kernels, hard-coded
shapes, skipped work or lower precision, and skills without the required
sections or a snake_case name); ``dedup`` (a name collision gets a numeric
suffix; near-duplicate content keeps the better verified skill); ``verify``
(runs the caller's verifier: a greedy turn-1 re-generation with the new skill
must be correct, reach ``verify_min_speedup`` and ``verify_min_gain`` times the
original turn-1 speedup); ``Admission`` (stages verified skills, at most one per
task per step, the best verified, and writes them only when ``commit`` is
called after the step's policy update succeeded). During training this module
is the only writer to the store.

In example code, verification code is allowed to call torch: statements under
``if __name__ == "__main__":`` and functions named ``check*``, ``reference*``,
``ref_*`` or ``test*``. Everywhere else a torch compute op is a fallback.

Does not cover: generating the re-generation (the rollout's verifier does) or
the summary agent's tool-call parsing (the agents package does).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from ..pysource import parse as parse_source
from ..records import Skill
from .bm25 import tokenize
from .markdown import example_blocks
from .schema import check_structure, sections

# torch calls that do the work a custom kernel should do.
_TORCH_COMPUTE = frozenset("""
matmul mm bmm addmm baddbmm einsum linear bilinear conv1d conv2d conv3d conv_transpose1d conv_transpose2d
conv_transpose3d softmax log_softmax layer_norm group_norm batch_norm instance_norm rms_norm
scaled_dot_product_attention cross_entropy nll_loss relu gelu silu sigmoid tanh elu leaky_relu
hardtanh softplus mish max_pool2d avg_pool2d adaptive_avg_pool2d sum mean var std norm
cumsum logsumexp compile
""".split())
_TORCH_ROOTS = ("torch", "F", "nn", "functional")
_CHECK_FUNC_RE = re.compile(r"^(check|reference|ref_|test)")

_NEGATION = re.compile(r"\b(never|not|don'?t|do not|avoid|avoids|instead of|rather than|no|without|"
                       r"unlike|forbid\w*|reject\w*|must not|cannot|won'?t)\b[^.\n]{0,60}$", re.I)

_PROSE_RULES: list[tuple[str, re.Pattern]] = [
    ("recommends torch.compile instead of a kernel",
     re.compile(r"\b(use|call|wrap|apply|run|rely on)\b[^.\n]{0,40}\btorch\.compile\b", re.I)),
    ("recommends cuBLAS/cuDNN instead of a kernel",
     re.compile(r"\b(use|call|fall\s*back|delegate|dispatch|rely on|defer)\b[^.\n]{0,40}\b(cublas\w*|cudnn\w*)\b", re.I)),
    ("recommends a torch fallback instead of a kernel",
     re.compile(r"(\bfall\s*back\b|\bdelegate\b|\bdefer\b)[^.\n]{0,40}\b(torch|pytorch|aten|eager)\b|"
                r"\b(use|call)\s+(the\s+)?(torch|pytorch|aten)\s+(op|ops|operator|implementation|version)\b", re.I)),
    ("hard-codes shapes",
     re.compile(r"\bhard[- ]?cod\w*\b[^.\n]{0,40}\b(shape|size|dimension|dim)s?\b|"
                r"\b(specialize|assume)\b[^.\n]{0,30}\b(the|input|test)\s+(input\s+)?shapes?\b", re.I)),
    ("skips work the reference does",
     re.compile(r"\bskip\w*\b[^.\n]{0,30}\b(computation|compute|work|the reduction|the matmul|the kernel)\b|"
                r"\b(cache|memoi[sz]e|reuse)\b[^.\n]{0,30}\b(the\s+)?(output|result)s?\b[^.\n]{0,30}\b(across|between)\s+calls\b|"
                r"\breturn\s+(the\s+)?input\b", re.I)),
    ("lowers precision",
     re.compile(r"\b(cast|convert|downcast|switch|use)\b[^.\n]{0,30}\b(to\s+)?(fp16|half|bf16|bfloat16|fp8|int8)\b[^.\n]{0,40}"
                r"\b(faster|speed|speedup)\b|\b(reduce|lower)\w*\s+(the\s+)?precision\b|allow_tf32\s*=\s*true", re.I)),
]

_CODE_TEXT_RULES: list[tuple[str, re.Pattern]] = [
    ("calls cuBLAS/cuDNN instead of a kernel", re.compile(r"\b(cublas|cudnn)[A-Z]\w*\s*\(", re.I)),
    ("calls an ATen op instead of a kernel",
     re.compile(r"\b(at|torch)::(matmul|mm|bmm|addmm|conv\w*|softmax|layer_norm|batch_norm|linear|einsum)\s*\(")),
    ("lowers precision", re.compile(r"allow_tf32\s*=\s*True|allow_fp16_reduced_precision_reduction\s*=\s*True")),
]


def _negated(text: str, start: int) -> bool:
    line_start = max(text.rfind("\n", 0, start), text.rfind(". ", 0, start)) + 1
    return bool(_NEGATION.search(text[line_start:start]))


def _prose(content: str) -> str:
    return re.sub(r"```.*?```", " ", content, flags=re.S)


class _TorchCalls(ast.NodeVisitor):
    """Torch compute calls and downcasts outside verification code."""

    def __init__(self):
        self.hits: list[str] = []

    def visit_If(self, node: ast.If) -> None:
        t = node.test
        if (isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id == "__name__"):
            for n in node.orelse:
                self.visit(n)
            return
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if not _CHECK_FUNC_RE.match(node.name):
            self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute):
            root = f.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in _TORCH_ROOTS and f.attr in _TORCH_COMPUTE:
                self.hits.append(f"{ast.unparse(f)}")
            if f.attr in ("half", "bfloat16"):
                self.hits.append(f".{f.attr}()")
        self.generic_visit(node)


def content_filter(skill: Skill) -> Optional[str]:
    """None when the skill may enter the library, else the reason it may not."""
    reason = check_structure(skill)
    if reason:
        return reason
    prose = _prose(skill.content) + "\n" + skill.description
    for why, pat in _PROSE_RULES:
        for m in pat.finditer(prose):
            if not _negated(prose, m.start()):
                return f"{why}: '{m.group(0).strip()[:80]}'"
    for lang, code in example_blocks(skill.content):
        for why, pat in _CODE_TEXT_RULES:
            m = pat.search(code)
            if m:
                return f"{why}: '{m.group(0).strip()[:80]}'"
        if lang in ("python", "py"):
            try:
                tree = parse_source(code)
            except SyntaxError as e:
                return f"example code does not parse (line {e.lineno}: {e.msg})"
            v = _TorchCalls()
            v.visit(tree)
            if v.hits:
                return f"example computes with torch instead of a kernel: {', '.join(sorted(set(v.hits))[:3])}"
    if not any(example_blocks(skill.content)) and not sections(skill.content).get("Example"):
        return "section '## Example' has no code"
    return None


# --------------------------------------------------------------------------- dedup
def _shingles(text: str, n: int = 3) -> set[tuple[str, ...]]:
    toks = tokenize(text)
    return {tuple(toks[i:i + n]) for i in range(max(1, len(toks) - n + 1))}


def similarity(a: Skill, b: Skill) -> float:
    """Jaccard similarity of token 3-gram sets of the two contents."""
    sa, sb = _shingles(a.content), _shingles(b.content)
    return len(sa & sb) / max(1, len(sa | sb))


@dataclass
class DedupResult:
    action: str  # "add" | "replace" | "drop"
    skill: Skill  # possibly renamed
    other: Optional[str] = None  # the near-duplicate it replaces or loses to
    similarity: float = 0.0


def dedup(skill: Skill, library: list[Skill], threshold: float = 0.8) -> DedupResult:
    """Near-duplicate content keeps the better verified one; a name collision gets a suffix."""
    best, best_sim = None, 0.0
    for other in library:
        sim = similarity(skill, other)
        if sim > best_sim:
            best, best_sim = other, sim
    if best is not None and best_sim >= threshold:
        if (skill.verify_speedup or 0.0) > (best.verify_speedup or 0.0):
            return DedupResult("replace", _unique_name(skill, library, exclude=best.name), best.name, best_sim)
        return DedupResult("drop", skill, best.name, best_sim)
    return DedupResult("add", _unique_name(skill, library), None, best_sim)


def _unique_name(skill: Skill, library: list[Skill], exclude: Optional[str] = None) -> Skill:
    taken = {s.name for s in library if s.name != exclude}
    if skill.name not in taken:
        return skill
    i = 2
    while f"{skill.name}_{i}" in taken:
        i += 1
    return replace(skill, name=f"{skill.name}_{i}")


# --------------------------------------------------------------------------- verification
@dataclass
class Verification:
    skill: str
    correct: bool
    speedup: Optional[float]
    original_speedup: Optional[float]
    ok: bool
    reason: Optional[str] = None
    gpu: Optional[str] = None


def _field(result: Any, key: str) -> Any:
    return result.get(key) if isinstance(result, dict) else getattr(result, key, None)


def verify(skill: Skill, verifier: Callable[[Skill], Any], original_turn1_speedup: Optional[float],
           cfg) -> Verification:
    """Run ``verifier(skill)`` (a greedy turn-1 re-generation with the skill added;
    returns an EvalResult or a dict with ``correct`` and ``speedup``) and apply
    the thresholds of ``cfg`` (``verify_min_speedup``, ``verify_min_gain``)."""
    result = verifier(skill)
    correct = bool(_field(result, "correct"))
    speedup = _field(result, "speedup")
    gpu = _field(result, "device") or _field(result, "gpu")
    orig = original_turn1_speedup or 0.0
    need = max(cfg.verify_min_speedup, cfg.verify_min_gain * orig)
    if not correct:
        reason = "verification run was not correct"
    elif speedup is None:
        reason = "verification run has no speedup (timing unavailable)"
    elif speedup < need:
        reason = (f"verification speedup {speedup:.2f}x below {need:.2f}x "
                  f"(min {cfg.verify_min_speedup}x and {cfg.verify_min_gain}x the turn-1 {orig:.2f}x)")
    else:
        reason = None
    return Verification(skill=skill.name, correct=correct, speedup=speedup, original_speedup=orig,
                        ok=reason is None, reason=reason, gpu=gpu)


# --------------------------------------------------------------------------- staging
@dataclass
class Decision:
    task: str
    skill: str
    staged: bool
    reason: Optional[str] = None
    speedup: Optional[float] = None


@dataclass
class Admission:
    """Skills waiting for the end of a training step (one per task: the best verified)."""

    dedup_threshold: float = 0.8
    staged: dict[str, tuple[Skill, Verification]] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)

    def stage(self, task_name: str, skill: Skill, verification: Verification) -> Decision:
        """Keep ``skill`` for ``task_name`` if it passed the filter and verification
        and beats what is already staged for that task."""
        reason = content_filter(skill)
        if reason is None and not verification.ok:
            reason = verification.reason or "not verified"
        if reason is None:
            cur = self.staged.get(task_name)
            if cur is not None and (cur[1].speedup or 0.0) >= (verification.speedup or 0.0):
                reason = f"'{cur[0].name}' verified faster for this task ({cur[1].speedup:.2f}x)"
            else:
                if cur is not None:
                    self.decisions.append(Decision(task_name, cur[0].name, False,
                                                   f"superseded by '{skill.name}'", cur[1].speedup))
                prov = replace(skill, verify_speedup=verification.speedup, source_task=task_name,
                               gpu=verification.gpu or skill.gpu)
                self.staged[task_name] = (prov, verification)
        d = Decision(task_name, skill.name, reason is None, reason, verification.speedup)
        self.decisions.append(d)
        return d

    def consider(self, task_name: str, skill: Skill, verifier: Callable[[Skill], Any],
                 original_turn1_speedup: Optional[float], cfg) -> Decision:
        """Filter first (no verification run for a rejected skill), then verify and stage."""
        reason = content_filter(skill)
        if reason is not None:
            d = Decision(task_name, skill.name, False, reason)
            self.decisions.append(d)
            return d
        return self.stage(task_name, skill, verify(skill, verifier, original_turn1_speedup, cfg))

    def commit(self, store, step: int) -> list[Skill]:
        """Write the staged skills at ``step`` in one transaction and clear the stage.
        Call only after the step's policy update succeeded; otherwise ``discard``."""
        library = store.all()
        adds: list[Skill] = []
        replaces: list[tuple[str, Skill]] = []
        for task_name in sorted(self.staged):
            skill, _ = self.staged[task_name]
            skill = replace(skill, step=step)
            res = dedup(skill, library + adds + [s for _, s in replaces], self.dedup_threshold)
            if res.action == "drop":
                self.decisions.append(Decision(task_name, skill.name, False,
                                               f"near duplicate of '{res.other}' (similarity {res.similarity:.2f})"))
                continue
            if res.action == "replace" and any(s.name == res.other for s in library):
                replaces.append((res.other, res.skill))
            elif res.action == "replace":  # the loser was staged in this same commit
                adds = [s for s in adds if s.name != res.other] + [res.skill]
            else:
                adds.append(res.skill)
        written = store.apply(adds=adds, replaces=replaces, step=step) if (adds or replaces) else []
        self.staged.clear()
        return written

    def discard(self) -> None:
        """Drop everything staged (the step's update failed)."""
        self.staged.clear()
