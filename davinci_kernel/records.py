"""Every record that crosses a stage boundary.

Covers: tasks, skills, evaluation results (with the names of the stages where an
evaluation ends, ``Stage``, and of its error kinds, ``ErrorKind``), model completions,
turns, episodes and task groups, with lossless JSON round-trips (``to_dict`` /
``from_dict``) so that the evaluator, rollout, trainer and reports read the same files.

Does not cover: behaviour. Records hold data; the stages that fill them live in
their own packages. Reward and advantage are separate fields on purpose: the
reward is a fact about the environment, the advantage a choice of the trainer.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, Optional


def sha16(text: str) -> str:
    """Short content hash (task sources, candidate sources, build-cache keys)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class _Record:
    """JSON helpers shared by every record (nested records round-trip too)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        for f in dataclasses.fields(cls):
            sub = _NESTED.get((cls.__name__, f.name))
            if sub is None or f.name not in kwargs or kwargs[f.name] is None:
                continue
            value = kwargs[f.name]
            if isinstance(value, list):
                kwargs[f.name] = [sub.from_dict(v) if isinstance(v, dict) else v for v in value]
            elif isinstance(value, dict):
                kwargs[f.name] = sub.from_dict(value)
        return cls(**kwargs)


# --------------------------------------------------------------------------- tasks
@dataclass
class Task(_Record):
    """One KernelBench-format problem: a module defining ``Model``, ``get_inputs``
    and ``get_init_inputs``. ``source`` is the full file text (the trusted reference)."""

    name: str  # suite-relative id, e.g. "level1/19_ReLU"
    level: int
    problem_id: int
    source: str
    suite: str = "builtin"  # "builtin" | "kernelbench:DIR" | "hf:NAME"
    path: Optional[str] = None  # file on disk, when there is one
    op_type: str = ""  # coarse category ("matmul", "reduction", "fusion", ...)

    @property
    def hash(self) -> str:
        return sha16(self.source)

    @property
    def title(self) -> str:
        return self.name.rsplit("/", 1)[-1]


# --------------------------------------------------------------------------- skills
SKILL_FIELDS = ("name", "description", "scope", "tags", "content", "verify_speedup")


@dataclass
class Skill(_Record):
    """An optimization skill. The first six fields are the exchange format
    (one JSON object per JSONL line); the rest is provenance kept by the store."""

    name: str  # snake_case, unique in a library
    description: str
    scope: str = "general"  # "general" | "task_specific/<type>"
    tags: list[str] = field(default_factory=list)
    content: str = ""  # markdown: ## Motivation, ## Key Idea, ## Example
    verify_speedup: Optional[float] = None
    source_task: Optional[str] = None
    step: Optional[int] = None
    gpu: Optional[str] = None
    times_selected: int = 0
    times_improved: int = 0

    def export_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in SKILL_FIELDS}

    def metadata_line(self) -> str:
        """What the selection agent sees: name, scope, tags, description."""
        tags = ", ".join(self.tags)
        return f"{self.name} [{self.scope}] ({tags}): {self.description}"


# --------------------------------------------------------------------------- evaluation
class Stage:
    """Where an evaluation ended (``EvalResult.stage``); ``ORDER`` lists the stages in the
    order a candidate reaches them (``rollout.optimize`` ranks failed candidates by it)."""

    MISSING = "missing"  # a suite run found no candidate file for the task
    HARNESS = "harness"  # the harness itself failed (no worker, a bug): says nothing of the candidate
    STATIC = "static"  # AST checks before anything runs; also a reply without code
    REFERENCE = "reference"  # the problem's inputs and outputs do not fit the device
    PROBLEM = "problem"  # the problem itself is broken (its Model, get_inputs or get_init_inputs raised)
    COMPILE = "compile"  # importing the candidate module (module-level code, CUDA / Triton builds)
    LOAD = "load"  # ModelNew(*get_init_inputs())
    CORRECTNESS = "correctness"  # trials on fresh inputs
    PERTURBATION = "perturbation"  # the re-check at perturbed sizes (left only by a timeout there)
    TIMING = "timing"
    DONE = "done"
    ORDER = (MISSING, HARNESS, STATIC, PROBLEM, REFERENCE, COMPILE, LOAD, CORRECTNESS, PERTURBATION, TIMING, DONE)


class ErrorKind:
    """``EvalResult.error_kind`` values (None when nothing failed); ``ALL`` holds every one."""

    MISSING = "missing"  # no candidate file (suite runs)
    UNREADABLE = "unreadable"  # a candidate file that cannot be read as UTF-8 text (suite runs)
    NO_CODE = "no_code"  # the reply had no code block (rollout)
    HARNESS_ERROR = "harness_error"  # a bug of the harness
    NO_WORKER = "no_worker"  # no worker process became ready
    SYNTAX_ERROR = "syntax_error"
    NO_MODELNEW = "no_modelnew"  # the candidate defines no ModelNew class
    REJECTED = "rejected"  # a static check flagged the source before it ran
    REFERENCE_ERROR = "reference_error"  # the trusted reference failed
    TOO_LARGE = "too_large"  # the problem's inputs and outputs do not fit on the device
    IMPORT_ERROR = "import_error"
    COMPILE_ERROR = "compile_error"  # any other failure while importing / building the module
    UNSUPPORTED_ON_CPU = "unsupported_on_cpu"  # a CUDA C++ (load_inline) candidate on a CPU device
    RUNTIME_ERROR = "runtime_error"  # an exception raised by candidate code
    CUDA_ERROR = "cuda_error"  # a CUDA error (the worker's context is then discarded)
    WORKER_CRASH = "worker_crash"  # the candidate's process died
    TIMEOUT = "timeout"  # past eval.compile_timeout_s or eval.run_timeout_s
    PROTOCOL_ERROR = "protocol_error"  # the worker broke the message protocol
    OUTPUT_STRUCTURE = "output_structure"  # not the reference's structure of outputs
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    NAN_INF = "nan_inf"  # NaN / Inf where the reference has finite values
    WRONG_OUTPUT = "wrong_output"  # values beyond the tolerances
    UNSUPPORTED_OUTPUT = "unsupported_output"  # an output the harness cannot compare
    # a timed figure below the problem's speed-of-light floor by more than the margin (lightspeed.py)
    FASTER_THAN_LIGHT = "faster_than_light"
    ALL = frozenset((MISSING, UNREADABLE, NO_CODE, HARNESS_ERROR, NO_WORKER, SYNTAX_ERROR, NO_MODELNEW, REJECTED,
                     REFERENCE_ERROR, TOO_LARGE, IMPORT_ERROR, COMPILE_ERROR, UNSUPPORTED_ON_CPU, RUNTIME_ERROR,
                     CUDA_ERROR, WORKER_CRASH, TIMEOUT, PROTOCOL_ERROR, OUTPUT_STRUCTURE, SHAPE_MISMATCH,
                     DTYPE_MISMATCH, NAN_INF, WRONG_OUTPUT, UNSUPPORTED_OUTPUT, FASTER_THAN_LIGHT))


@dataclass
class KernelTime(_Record):
    name: str
    time_ms: float
    custom: bool  # launched by the candidate's own kernel, not by a torch op
    calls: int = 1


@dataclass
class EvalResult(_Record):
    """What the environment says about one candidate on one task.

    ``correct`` is true only when the candidate counts for Fast_p and rewards: any
    hard reward-hacking flag makes it false even if the numbers matched."""

    task: str = ""
    level: int = 0
    compiled: bool = False
    correct: bool = False
    flags: list[str] = field(default_factory=list)  # named guard hits (see evaluate/guards.py)
    warnings: list[str] = field(default_factory=list)  # soft observations, not failures
    stage: str = Stage.STATIC  # one of Stage.ORDER
    error_kind: Optional[str] = None  # one of ErrorKind.ALL
    error_msg: Optional[str] = None
    backend: str = "triton"  # triton | cuda | torch
    device: str = "cpu"
    trials: int = 0
    trials_passed: int = 0
    max_abs_diff: Optional[float] = None
    max_rel_diff: Optional[float] = None
    rel_l2_error: Optional[float] = None
    runtime_ms: Optional[float] = None  # candidate median
    runtime_spread: Optional[float] = None  # (p90 - p10) / median of the candidate samples
    ref_runtime_ms: Optional[float] = None  # eager reference, interleaved with the candidate
    compile_runtime_ms: Optional[float] = None  # torch.compile baseline
    speedup: Optional[float] = None  # vs eager
    speedup_ci: Optional[list[float]] = None  # 95 % interval [low, high] on speedup (intervals.speedup_ci); None untimed
    # the problem's speed-of-light floor time / the candidate's time (lightspeed.py); None untimed or no peaks
    peak_fraction: Optional[float] = None
    speedup_compile: Optional[float] = None  # vs torch.compile
    coverage: Optional[float] = None  # custom-kernel GPU time / total GPU time
    custom_launches: int = 0
    kernels: list[KernelTime] = field(default_factory=list)  # top kernels by time
    timing_available: bool = False
    verifiable: bool = True  # false when this device cannot check it (bf16 dot on CPU)
    sandbox: str = ""  # the OS sandbox the candidate ran in (evaluate/sandbox.py), or what was missing
    self_check: bool = False  # the problem's own Model judged as its candidate: a harness check, never a solution
    reused: bool = False  # the verdict of the same source judged earlier on this task (eval.reuse_verdicts, or a duplicate in one batch)
    eval_seconds: float = 0.0
    # where eval_seconds went, by phase ("worker.*": the worker's own split of the transfer and timing phases)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    timing_detail: dict[str, Any] = field(default_factory=dict)  # iters, placements, per-placement speedups, wall checks
    # what the harness drew to judge on (trial seeds, perturbed size and its seed, timed checks): a verdict's replay
    judged_inputs: dict[str, Any] = field(default_factory=dict)
    # float32 outputs judged for precision: per output leaf its error, limit and measure ("oracle":
    # against a float64 oracle, the limit calibrated for the problem; "reference": the fixed limit)
    precision: Optional[dict] = None
    feedback: str = ""


# --------------------------------------------------------------------------- generation
@dataclass
class Completion(_Record):
    """One sampled answer. Token ids and log-probs are filled when the backend gives them."""

    text: str
    token_ids: Optional[list[int]] = None
    logprobs: Optional[list[float]] = None
    prompt_token_ids: Optional[list[int]] = None
    finish_reason: str = "stop"
    model: str = ""
    error: Optional[str] = None  # set when generation failed after retries


@dataclass
class Turn(_Record):
    """One model call of one role, with what the environment made of it."""

    role: str  # "select" | "policy" | "summary" | "verify"
    task: str
    messages: list[dict[str, Any]] = field(default_factory=list)  # the prompt, chat format
    completion: Optional[Completion] = None
    scheme: int = 0  # selection scheme index (the null scheme is the last)
    rollout: int = 0
    turn: int = 0  # 0-based turn inside the episode (policy); sample index otherwise
    parsed: Any = None  # parser output (code, selected skills, proposed skills)
    parse_error: Optional[str] = None
    result: Optional[EvalResult] = None
    reward: Optional[float] = None
    advantage: Optional[float] = None
    kept: bool = True  # false when rejection sampling dropped it


@dataclass
class Episode(_Record):
    """One policy rollout: up to T turns on one task under one skill scheme."""

    task: str
    scheme: int
    rollout: int
    skills: list[str] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        return [t.reward or 0.0 for t in self.turns]

    @property
    def best_turn(self) -> Optional[int]:
        best, best_s = None, -1.0
        for i, t in enumerate(self.turns):
            r = t.result
            if r is not None and r.correct and (r.speedup or 0.0) > best_s:
                best, best_s = i, r.speedup or 0.0
        return best


@dataclass
class TaskGroup(_Record):
    """Everything one task produced in one step: selections, episodes, summaries."""

    task: str
    schemes: list[list[str]] = field(default_factory=list)  # skill names per scheme
    selections: list[Turn] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    summaries: list[Turn] = field(default_factory=list)
    verifications: list[Turn] = field(default_factory=list)
    admitted: list[Skill] = field(default_factory=list)
    step: int = 0


_NESTED: dict[tuple[str, str], type] = {
    ("EvalResult", "kernels"): KernelTime,
    ("Turn", "completion"): Completion,
    ("Turn", "result"): EvalResult,
    ("Episode", "turns"): Turn,
    ("TaskGroup", "selections"): Turn,
    ("TaskGroup", "episodes"): Episode,
    ("TaskGroup", "summaries"): Turn,
    ("TaskGroup", "verifications"): Turn,
    ("TaskGroup", "admitted"): Skill,
}
