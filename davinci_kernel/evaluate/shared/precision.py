"""Precision by calibration: how close to exact a float32 output must be, measured per problem.

A float32 problem may be answered with TF32 tensor-core matmuls (KernelBench accepts them,
and Triton's ``tl.dot`` on float32 uses TF32 by default, truncating the operands'
mantissas: triton#4574), but not with bfloat16 operands behind float32 outputs. Which
error separates the two depends on the problem (a sum of K positive products averages
rounding errors out as 1/sqrt(K); a softmax scales them by its inputs' size), so one fixed
limit either lets bf16 through on some problems or flags TF32 on others. Each problem
calibrates its own limit per float32 output leaf instead:

- in the reference process, which never runs candidate code (``reference.calibrate_precision``
  drives; the pieces are here): the problem's Model in float64 (model and inputs
  ``.double()``, the same init and input seeds) is the oracle. Against it, the error of
  ``VARIANTS``: the float32 reference as KernelBench runs it; TF32, emulated by rounding
  every float32 operand (inputs, parameters and buffers, and both operands of every
  contraction: matmul, convolution, attention; ``RoundedContractions``) to TF32's 10-bit
  mantissa, to nearest and toward zero, plus on a GPU the model with TF32 allowed; and
  bfloat16, the same emulation at a 7-bit mantissa.
- the limit rule (``leaf_limit``, harness side): honest = the largest float32/TF32 error;
  when the bf16 error is at least ``ratio`` times it, the limit is the geometric mean of
  ``margin`` x honest and the bf16 error; otherwise the problem cannot tell them apart and
  the fixed limit applies, with a warning.
- the verdict (``verdict``, harness side): each float32 leaf of *every* compared call of the
  candidate against the oracle's for that call (sampled at the reference entry's secret
  indices when large), by the same error measure, against its limit: every correctness
  trial, the refill (``recheck1``) and the second run (``determinism0``), the last timed
  round (``timed{i}``) and the timed checks (``check{j}``), all at the task's size and its
  limit, and the perturbed size (``pcand``) against its own oracle and its own limit,
  calibrated at that size (errors grow with a contraction's length). A candidate that
  counts calls and answers at low precision on some of them is held to the limit on each:
  no compared call is judged by a looser rule than another.

The error measure (``scaled_error``) is a relative L2 error after the best uniform scale
within ``1 +- SCALE_ALLOWANCE``: truncated TF32 operands shrink every product by ~7e-4 on
average, a bias that would otherwise make honest Triton TF32 look as far off as bf16
rounded to nearest (whose error is unbiased noise, 8x TF32's). No candidate gains by it:
the output must first pass allclose and the per-dtype relative L2 check against the
reference (``correctness.py``). Does not cover: running models (``reference.py``), other
dtypes (their fixed limits are in ``correctness.REL_L2_LIMITS``), the low-mantissa sign of
half precision (``guards.precision_flag``).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

import torch

CALIBRATION_CALLS = 2  # compared calls the variants are calibrated on (the first trials; the oracle runs every one)
TF32_BITS, BF16_BITS = 10, 7  # explicit mantissa bits (float32 has 23)
SCALE_ALLOWANCE = 2e-3  # a uniform relative scale the error measure forgives (truncated TF32: ~7e-4)
MIN_ELEMENTS = 64  # fewer compared values than this: the errors are too noisy to calibrate on
HONEST_FLOOR = 1e-6  # the least honest error assumed (float32 arithmetic in another order, approximate exp)


@dataclass(frozen=True)
class Variant:
    """One way of running the problem's Model: its dtype, and how float32 operands are rounded."""
    name: str
    bits: int = 23  # mantissa bits float32 operands keep (23: untouched)
    mode: str = "nearest"  # "nearest" (ties to even) | "zero" (truncation)
    double: bool = False  # the float64 oracle
    device_tf32: bool = False  # TF32 allowed in cuBLAS / cuDNN (a GPU only)


ORACLE = Variant("oracle", double=True)
VARIANTS = (Variant("float32"), Variant("tf32_nearest", TF32_BITS), Variant("tf32_zero", TF32_BITS, "zero"),
            Variant("tf32_device", device_tf32=True), Variant("bf16", BF16_BITS))
HONEST = ("float32", "tf32_nearest", "tf32_zero", "tf32_device")  # errors an honest float32 kernel may have
LOW = "bf16"  # the error of bfloat16 operands


# --------------------------------------------------------------------------- rounding (any process)
def round_mantissa(x: torch.Tensor, bits: int, mode: str = "nearest") -> torch.Tensor:
    """``x`` (any shape) with float32 values kept to ``bits`` explicit mantissa bits: to nearest
    (ties to even, as a bfloat16 cast) or toward zero (truncation). NaN/Inf unchanged; a value
    rounded past the largest finite one becomes Inf, as in the narrower type. Any other dtype,
    or ``bits`` >= 23, comes back as it is."""
    if x.dtype != torch.float32 or bits >= 23:
        return x
    drop = 23 - bits
    i = x.contiguous().view(torch.int32).to(torch.int64)  # (...) bit patterns; int64: no overflow
    if mode == "nearest":
        i = i + ((1 << (drop - 1)) - 1) + ((i >> drop) & 1)  # half an ulp less one, plus the kept lsb
    elif mode != "zero":
        raise ValueError(f"unknown rounding mode {mode!r}")
    i = i & ~((1 << drop) - 1)  # the sign bit stays: magnitudes round, two's complement keeps it
    out = i.to(torch.int32).view(torch.float32).reshape(x.shape)  # (...) float32
    return torch.where(torch.isfinite(x), out, x)


def round_tree(args: list, bits: int, mode: str) -> list:
    """A model's positional inputs with float32 tensors rounded (nested lists and tuples too)."""
    if bits >= 23:
        return list(args)

    def one(a):
        if isinstance(a, torch.Tensor):
            return round_mantissa(a, bits, mode)
        if isinstance(a, (list, tuple)):
            return type(a)(one(v) for v in a)
        return a

    return [one(a) for a in args]


def double_tree(args: list) -> list:
    """A model's positional inputs with floating tensors in float64 (the oracle's inputs)."""
    def one(a):
        if isinstance(a, torch.Tensor):
            return a.double() if a.is_floating_point() else a
        if isinstance(a, (list, tuple)):
            return type(a)(one(v) for v in a)
        return a

    return [one(a) for a in args]


def round_module_(model, bits: int, mode: str) -> None:
    """Round a module's float32 parameters and buffers in place (no-op for a non-module)."""
    if bits >= 23 or not isinstance(model, torch.nn.Module):
        return
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.dtype == torch.float32:
                t.copy_(round_mantissa(t, bits, mode))


CONTRACTIONS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "matmul",
                          "linear", "_addmm_activation", "einsum", "tensordot", "bilinear"})


def is_contraction(name: str) -> bool:
    """Whether an aten op (its overload packet's name) is done on tensor cores under TF32."""
    return name in CONTRACTIONS or "conv" in name or "attention" in name


class RoundedContractions:
    """A context in which both operands of every contraction are rounded first, as a TF32
    tensor core (or a bf16 one) reads them: a torch dispatch mode, for the trusted reference
    process only."""

    def __init__(self, bits: int, mode: str):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_map

        def rounded(a):
            return round_mantissa(a, bits, mode) if isinstance(a, torch.Tensor) else a

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if is_contraction(func.overloadpacket.__name__):
                    args, kwargs = tree_map(rounded, args), tree_map(rounded, kwargs)
                return func(*args, **kwargs)

        self.mode = _Mode() if bits < 23 else contextlib.nullcontext()

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


@contextlib.contextmanager
def arithmetic(variant: Variant, on_gpu: bool):
    """Run a model's forward as ``variant`` computes: TF32 allowed in cuBLAS and cuDNN (the
    flags restored after), contraction operands rounded, or float32/float64 as they are."""
    if variant.device_tf32 and on_gpu:
        mm, dnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = True, True
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = mm, dnn
        return
    with RoundedContractions(variant.bits, variant.mode):
        yield


# --------------------------------------------------------------------------- errors (any process)
def compared_values(leaf: Any, sample_seed: Optional[int]) -> Optional[torch.Tensor]:
    """The values a leaf is judged on, flat (n,), on its device: all of them, or those at the
    secret sample indices when it has more than ``transfer.SAMPLE_MIN`` (as the reference
    entry keeps it). None for a leaf that is not a real floating tensor."""
    from .transfer import SAMPLE_MIN, sample_indices

    if not isinstance(leaf, torch.Tensor) or not leaf.is_floating_point():
        return None
    flat = leaf.detach().reshape(-1)  # (numel,)
    if sample_seed is not None and flat.numel() > SAMPLE_MIN:
        flat = flat[sample_indices(torch, flat.numel(), sample_seed).to(flat.device)]  # (SAMPLE_N,)
    return flat


class Judged(NamedTuple):
    """An output leaf reduced to what is judged of it: its dtype, full shape and values (n,)."""
    dtype: torch.dtype
    shape: tuple
    values: torch.Tensor


def judged(leaf: Any, sample_seed: Optional[int]) -> Optional[Judged]:
    """``leaf`` as a ``Judged`` (a copy of its judged values: the output itself can go), or None
    for a leaf that is not a real floating tensor."""
    v = compared_values(leaf, sample_seed)
    return None if v is None else Judged(leaf.dtype, tuple(leaf.shape), v.clone())


def scaled_error(x: torch.Tensor, oracle: torch.Tensor, allowance: float = SCALE_ALLOWANCE) -> float:
    """||x - s o|| / ||o|| with s the least-squares scale of ``o`` towards ``x`` clamped to
    1 +- ``allowance``. ``x``, ``oracle``: the same number of values, any shapes and floating
    dtypes (float64 arithmetic). 0 when both are zero, inf when only the oracle is; NaN/Inf in
    ``x`` give inf."""
    xf = x.reshape(-1).to(torch.float64)  # (n,)
    of = oracle.reshape(-1).to(device=xf.device, dtype=torch.float64)  # (n,)
    if xf.numel() != of.numel():
        raise ValueError(f"{xf.numel()} values against {of.numel()}")
    if not bool(torch.isfinite(xf).all()):
        return math.inf
    oo = float(of @ of)
    if oo == 0.0:
        return 0.0 if not bool(xf.any()) else math.inf
    s = min(max(float(xf @ of) / oo, 1.0 - allowance), 1.0 + allowance)
    return float(torch.linalg.vector_norm(xf - s * of)) / math.sqrt(oo)


def rel_l2(x: torch.Tensor, ref: torch.Tensor) -> float:
    """||x - ref|| / ||ref|| in float64 (the fixed rule's measure); shapes as ``scaled_error``."""
    return scaled_error(x, ref, 0.0)


def leaf_errors(outs: list, oracle: list) -> list[Optional[float]]:
    """Per output leaf, the worst ``scaled_error`` over trials of one variant's outputs against
    the oracle's. ``outs``, ``oracle``: per trial, the output leaves as ``judged`` gives them.
    None for a leaf that is not a float32 tensor of the oracle's (float64) shape on every trial."""
    errs: list[Optional[float]] = []
    for j in range(len(oracle[0]) if oracle else 0):
        worst: Optional[float] = 0.0
        for out, orc in zip(outs, oracle):
            x, o = (out[j] if j < len(out) else None), orc[j]
            if (x is None or o is None or len(out) != len(orc) or x.dtype != torch.float32
                    or o.dtype != torch.float64 or x.shape != o.shape):
                worst = None
                break
            worst = max(worst, scaled_error(x.values, o.values))
        errs.append(worst)
    return errs


# --------------------------------------------------------------------------- the limit rule (harness)
def leaf_limit(errors: dict[str, Optional[float]], n: int, margin: float,
               ratio: float) -> tuple[Optional[float], str]:
    """(limit, why) for one float32 leaf from its calibrated errors (``HONEST`` names and
    ``LOW``; a variant not run is None) over ``n`` compared values; limit None: not
    discriminated, ``why`` says so."""
    honest = [e for k, e in errors.items() if k in HONEST and e is not None]
    low = errors.get(LOW)
    if not honest or low is None or not all(math.isfinite(e) for e in honest + [low]):
        return None, "the float32, TF32 or bf16 runs gave no finite error"
    if n < MIN_ELEMENTS:
        return None, f"{n} compared values are too few to calibrate on (at least {MIN_ELEMENTS})"
    h = max(max(honest), HONEST_FLOOR)
    if low < ratio * h:
        return None, f"bf16 operands ({low:.2g}) are not {ratio:g}x less accurate than float32/TF32 ({h:.2g})"
    return math.sqrt(margin * h * low), "calibrated"


def calibration_record(result: Optional[dict]) -> Optional[dict]:
    """The reference process's calibration reply as it is kept: {"trials", "n", "errors"} with
    per-leaf lists, or {"error"}; None when there is none."""
    if not isinstance(result, dict):
        return None
    if "error" in result:
        return {"error": str(result["error"])[:300]}
    return {"trials": int(result.get("trials", 0)), "n": list(result.get("n", [])),
            "errors": {k: list(v) for k, v in (result.get("errors") or {}).items()},
            "oracles": [str(k) for k in result.get("oracles") or []]}


# --------------------------------------------------------------------------- the verdict (harness)
@dataclass
class LeafVerdict:
    """One float32 output leaf judged: its worst error over the compared calls and the limit it is held to."""
    output: int  # the leaf's index in the flattened outputs
    error: float
    limit: float
    measure: str  # "oracle": scaled_error against the float64 oracle, calibrated limit;
    #               "reference": relative L2 against the float32 reference, the fixed limit
    honest: Optional[float] = None  # the calibrated float32/TF32 error ("oracle" only)
    bf16: Optional[float] = None  # the calibrated bf16-operand error ("oracle" only)
    note: str = ""  # why the fixed limit applies
    call: str = ""  # the compared call with the worst error (its output key: cand0, check1, pcand, ...)
    size: str = "task"  # "task" | "perturbed": which size's limit


@dataclass
class PrecisionVerdict:
    leaves: list[LeafVerdict]
    warnings: list[str]
    oracle_calls: int = 0  # compared calls judged against the float64 oracle

    def record(self) -> Optional[dict]:
        """What ``EvalResult.precision`` keeps; None when no output is float32."""
        if not self.leaves:
            return None
        return {"oracle_calls": self.oracle_calls,
                "leaves": [{k: v for k, v in vars(x).items() if v not in (None, "")} for x in self.leaves]}


def _flat(leaf: Any) -> tuple[Any, Optional[torch.Tensor]]:
    """(what the values are of, the flat real values) of a judged leaf: a tensor (its shape)
    or a sample (seed and full shape); (None, None) for anything else."""
    if isinstance(leaf, dict) and isinstance(leaf.get("values"), torch.Tensor):
        key, t = ("sample", leaf.get("seed"), tuple(leaf.get("full_shape") or ())), leaf["values"]
    elif isinstance(leaf, torch.Tensor):
        key, t = ("tensor", tuple(leaf.shape)), leaf
    else:
        return None, None
    return key, (torch.view_as_real(t.resolve_conj()) if t.is_complex() else t).reshape(-1)


def _is_float32(leaf: Any) -> bool:
    t = leaf.get("values") if isinstance(leaf, dict) else leaf
    return isinstance(t, torch.Tensor) and t.dtype in (torch.float32, torch.complex64)


def _worst(pairs: list[tuple[str, Any, Any]], measure) -> tuple[float, str]:
    """(the worst ``measure(candidate, reference)``, its call) over (call, reference leaf,
    candidate leaf) triples; inf for a pair whose values are not of the same thing."""
    worst, where = 0.0, ""
    for call, r, x in pairs:
        (kr, vr), (kx, vx) = _flat(r), _flat(x)
        if kr is None or kr != kx or vr.numel() != vx.numel():
            return math.inf, call
        e = measure(vx, vr)
        if not e <= worst:
            worst, where = e, call
    return worst, where


def _index(key: str, prefix: str) -> Optional[int]:
    rest = key[len(prefix):]
    return int(rest) if key.startswith(prefix) and rest.isdigit() else None


def compared_call(entry: dict, key: str) -> Optional[tuple[str, Any, Any]]:
    """(size, its oracle's leaves or None, its float32 reference's leaves) of the compared
    call whose output is ``key``, or None for a key that is no compared call. Trials, the
    last timed round and the timed checks share the task's limit; the refill and the
    second run are trial 1's and trial 0's inputs; ``pcand`` is the perturbed size's."""
    refs, oracle = entry.get("refs") or [], entry.get("oracle") or []
    vrefs, voracle = entry.get("vrefs") or [], entry.get("voracle") or []

    def at(xs, i):
        return xs[i] if i is not None and 0 <= i < len(xs) else None

    if key == "pcand":
        return ("perturbed", entry.get("poracle"), entry.get("pref")) if entry.get("pref") is not None else None
    i = {"recheck1": 1, "determinism0": 0}.get(key)
    i = i if i is not None else (_index(key, "cand") if key.startswith("cand") else _index(key, "timed"))
    if i is not None and at(refs, i) is not None:
        return "task", at(oracle, i), refs[i]
    j = _index(key, "check")
    if j is not None and at(vrefs, j) is not None:
        return "task", at(voracle, j), vrefs[j]
    return None


def verdict(entry: dict, cand: dict, margin: float, ratio: float, fixed: float) -> PrecisionVerdict:
    """Every float32 output leaf of every compared call in ``cand`` (key -> leaves read by the
    harness: ``cand{i}``, ``recheck1``, ``determinism0``, ``pcand``, ``timed{i}``,
    ``check{j}``): against the float64 oracle of that call and its size's calibrated limit
    where the reference entry has them, else against the float32 reference and the
    ``fixed`` limit (with a warning). ``entry``: the reference cache entry (``refs``,
    ``oracle``, ``voracle``, ``precision``; ``pref``, ``poracle``, ``pprecision``). A leaf's
    verdict is its worst call's: one call at low precision fails it."""
    calls: dict[str, list] = {"task": [], "perturbed": []}
    for key in sorted(cand):
        got = compared_call(entry, key)
        if got is not None:
            calls[got[0]].append((key, got[1], got[2], cand[key] or []))
    leaves, why_not, on_oracle = [], [], 0
    for size, calib in (("task", entry.get("precision") or {}), ("perturbed", entry.get("pprecision") or {})):
        todo = calls[size]
        if not todo:
            continue
        template = todo[0][2]
        usable = "errors" in calib and all(o is not None for _, o, _, _ in todo)
        on_oracle += len(todo) if usable else 0
        for j, r0 in enumerate(template):
            if not _is_float32(r0):
                continue
            errs = {k: (v[j] if j < len(v) else None) for k, v in (calib.get("errors") or {}).items()}
            n = calib.get("n", [])
            limit, why = (leaf_limit(errs, int(n[j] or 0) if j < len(n) else 0, margin, ratio) if usable else
                          (None, "no float64 oracle" + (f" ({calib['error']})" if calib.get("error") else "")))
            if limit is not None:
                err, where = _worst([(k, o[j], t[j]) for k, o, _, t in todo if j < len(o) and j < len(t)],
                                    scaled_error)
                leaves.append(LeafVerdict(j, err, limit, "oracle", honest=max(errs[k] for k in HONEST
                                                                                if errs.get(k) is not None),
                                          bf16=errs[LOW], call=where, size=size))
            else:
                err, where = _worst([(k, r[j], t[j]) for k, _, r, t in todo if j < len(r) and j < len(t)], rel_l2)
                leaves.append(LeafVerdict(j, err, fixed, "reference", note=why, call=where, size=size))
                why_not.append(f"{size} size, output {j}: {why}")
    warnings = [f"precision_uncalibrated: bf16 could not be told from float32/TF32 ({'; '.join(why_not)[:300]}); "
                f"the fixed limit {fixed:g} applies"] if why_not else []
    return PrecisionVerdict(leaves, warnings, on_oracle)
