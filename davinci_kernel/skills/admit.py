"""Admission of new skills: filter, verify by execution, dedup, stage, commit.

Covers: ``content_filter`` (rejects skills whose content recommends torch
fallbacks, torch.compile, cuBLAS/cuDNN calls instead of kernels, hard-coded
shapes, skipped work or lower precision, skills without the required
sections or a snake_case name, and skills whose Example is a solution rather
than a technique: see below); ``dedup`` (a name collision gets a numeric
suffix; near-duplicate content keeps the better verified skill); ``verify``
(runs the caller's verifier: a greedy turn-1 re-generation with the new skill
must be correct, reach ``verify_min_speedup`` and ``verify_min_gain`` times the
original turn-1 speedup); ``Admission`` (stages verified skills, at most one per
task per step, the best verified, and writes them only when ``commit`` is
called after the step's policy update succeeded). During training this module
is the only writer to the store.

A skill is a technique, not a solution. Its Example is refused, each with a named
reason (the name leads the reason string and is kept as ``Decision.rule``):
``example_defines_module`` (the Example defines ``ModelNew``, or any class with a
``forward``: a whole candidate file, not a technique; static, always),
``example_copies_best_kernel`` (the Example holds at least ``COPY_CONTAINMENT`` of the
token 3-grams of the episode's best kernel, the source the summary was made from;
static, when that source is given) and ``example_solves_task`` (by execution: the
Example pasted alone as a candidate, ``example_candidate``, is judged correct on its
source task; the caller runs that evaluation and passes its result to ``verify``).

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


# --------------------------------------------------------------------------- technique, not solution
EXAMPLE_DEFINES_MODULE = "example_defines_module"
EXAMPLE_COPIES_BEST_KERNEL = "example_copies_best_kernel"
EXAMPLE_SOLVES_TASK = "example_solves_task"
REFUSALS = (EXAMPLE_DEFINES_MODULE, EXAMPLE_COPIES_BEST_KERNEL, EXAMPLE_SOLVES_TASK)
COPY_CONTAINMENT = 0.8  # share of the best kernel's token 3-grams found in the Example


def refusal_name(reason: Optional[str]) -> Optional[str]:
    """The named refusal a reason string starts with (``REFUSALS``), else None."""
    head = (reason or "").split(":", 1)[0]
    return head if head in REFUSALS else None


def _example_trees(skill: Skill) -> list[ast.Module]:
    """The parsed Python blocks of the Example (blocks that do not parse are skipped)."""
    out = []
    for lang, code in example_blocks(skill.content):
        if lang in ("python", "py"):
            try:
                out.append(parse_source(code))
            except SyntaxError:
                continue
    return out


def _module_classes(tree: ast.Module) -> list[str]:
    """Classes that make a candidate file: ``ModelNew`` (a class or a name bound to one)
    and any class with a ``forward`` method."""
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            has_forward = any(isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef)) and b.name == "forward"
                              for b in node.body)
            if node.name == "ModelNew" or has_forward:
                hits.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "ModelNew" for t in targets):
                hits.append("ModelNew")
    return hits


def containment(part: str, whole: str, n: int = 3) -> float:
    """Share of ``whole``'s token n-grams that also occur in ``part`` (1.0: all of it)."""
    sw = _shingles(whole, n)
    return len(sw & _shingles(part, n)) / max(1, len(sw))


def solution_check(skill: Skill, best_code: Optional[str] = None) -> Optional[str]:
    """None when the Example is a technique, else the named reason it is a solution:
    ``example_defines_module`` or, given the source the summary was made from,
    ``example_copies_best_kernel``."""
    for tree in _example_trees(skill):
        classes = _module_classes(tree)
        if classes:
            return (f"{EXAMPLE_DEFINES_MODULE}: the Example defines {classes[0]} (ModelNew or a class with a "
                    f"forward): a whole candidate file, not a technique; show only the code that carries the "
                    f"technique")
    if best_code and best_code.strip():
        code = "\n".join(c for _, c in example_blocks(skill.content)) or sections(skill.content).get("Example", "")
        share = containment(code, best_code)
        if share >= COPY_CONTAINMENT:
            return (f"{EXAMPLE_COPIES_BEST_KERNEL}: the Example holds {share:.0%} of the summarized episode's best "
                    f"kernel (at most {COPY_CONTAINMENT:.0%}): a pasted solution, not a technique")
    return None


_IMPORTS = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(d) or "autotune" in ast.unparse(d) or "heuristics" in ast.unparse(d)
               for d in fn.decorator_list)


def _launches(fn: ast.FunctionDef) -> bool:
    """The function's body launches a kernel: ``kernel[grid](...)``, or builds native code."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and (isinstance(node.func, ast.Subscript)
                                           or ast.unparse(node.func).endswith("load_inline")):
            return True
    return False


def example_candidate(skill: Skill) -> Optional[str]:
    """The Example as a candidate file, as a policy pasting it alone would hand it in;
    None when it cannot be one (no module class, no host function that launches a kernel).

    A module class is used as it is (a class not named ``ModelNew`` is subclassed as
    ``ModelNew``). Otherwise the last top-level host function that launches a kernel (not a
    ``@triton.jit`` kernel, not verification code) becomes the whole ``forward``: it gets the
    module's inputs, then its init arguments while it still has a parameter without a
    default (all of them for ``*args``). Cost: one evaluation of the source task, only for
    an Example that passed the static rules and defines such a function."""
    trees = _example_trees(skill)
    if not trees:
        return None
    code = "\n\n".join(ast.unparse(t) for t in trees)
    classes = [c for t in trees for c in _module_classes(t)]
    if classes:
        if "ModelNew" in classes:
            return _IMPORTS + "\n" + code + "\n"
        return f"{_IMPORTS}\n{code}\n\n\nclass ModelNew({classes[-1]}):\n    pass\n"
    hosts = [n for t in trees for n in t.body
             if isinstance(n, ast.FunctionDef) and not _is_jit(n) and not _CHECK_FUNC_RE.match(n.name)
             and not n.name.startswith("_") and _launches(n)]
    if not hosts:
        return None
    fn = hosts[-1]
    a = fn.args
    takes, needs = len(a.posonlyargs) + len(a.args), len(a.posonlyargs) + len(a.args) - len(a.defaults)
    # the inputs first, then the init arguments while the function still needs one
    pick = "args" if a.vararg is not None else f"args[:max({needs}, min(len(inputs), {takes}))]"
    return (f"{_IMPORTS}\n{code}\n\n\n"
            f"class ModelNew(nn.Module):\n"
            f"    def __init__(self, *init_inputs):\n"
            f"        super().__init__()\n"
            f"        self.init_inputs = list(init_inputs)\n\n"
            f"    def forward(self, *inputs):\n"
            f"        args = list(inputs) + self.init_inputs\n"
            f"        return {fn.name}(*{pick})\n")


def content_filter(skill: Skill, best_code: Optional[str] = None) -> Optional[str]:
    """None when the skill may enter the library, else the reason it may not.
    ``best_code``: the source the summary was made from (the episode's best kernel),
    when there is one: an Example that copies it is refused."""
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
    return solution_check(skill, best_code)


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
           cfg, example_result: Any = None) -> Verification:
    """Run ``verifier(skill)`` (a greedy turn-1 re-generation with the skill added;
    returns an EvalResult or a dict with ``correct`` and ``speedup``) and apply
    the thresholds of ``cfg`` (``verify_min_speedup``, ``verify_min_gain``).
    ``example_result``: the verdict on ``example_candidate(skill)`` on the source task
    (None: not run); judged correct, the skill is refused (``example_solves_task``)."""
    result = verifier(skill)
    correct = bool(_field(result, "correct"))
    speedup = _field(result, "speedup")
    gpu = _field(result, "device") or _field(result, "gpu")
    orig = original_turn1_speedup or 0.0
    need = max(cfg.verify_min_speedup, cfg.verify_min_gain * orig)
    if example_result is not None and _field(example_result, "correct"):
        reason = (f"{EXAMPLE_SOLVES_TASK}: the Example pasted alone as the candidate is judged correct on the "
                  f"source task: a solution, not a technique")
    elif not correct:
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
    rule: Optional[str] = None  # the named refusal (REFUSALS) the reason starts with, if any

    def __post_init__(self):
        if self.rule is None:
            self.rule = refusal_name(self.reason)


@dataclass
class Admission:
    """Skills waiting for the end of a training step (one per task: the best verified)."""

    dedup_threshold: float = 0.8
    staged: dict[str, tuple[Skill, Verification]] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)

    def stage(self, task_name: str, skill: Skill, verification: Verification,
              best_code: Optional[str] = None) -> Decision:
        """Keep ``skill`` for ``task_name`` if it passed the filter and verification
        and beats what is already staged for that task."""
        reason = content_filter(skill, best_code)
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
                 original_turn1_speedup: Optional[float], cfg, best_code: Optional[str] = None) -> Decision:
        """Filter first (no verification run for a rejected skill), then verify and stage."""
        reason = content_filter(skill, best_code)
        if reason is not None:
            d = Decision(task_name, skill.name, False, reason)
            self.decisions.append(d)
            return d
        return self.stage(task_name, skill, verify(skill, verifier, original_turn1_speedup, cfg), best_code)

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
