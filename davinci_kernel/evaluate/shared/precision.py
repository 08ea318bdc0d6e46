"""Precision by calibration: how close to exact each floating output must be, measured per problem and dtype.

A float32 problem may be answered with TF32 tensor-core matmuls (KernelBench accepts them,
and Triton's ``tl.dot`` on float32 uses TF32 by default, truncating the operands'
mantissas: triton#4574), but not with bfloat16 operands behind float32 outputs; a float16
problem may accumulate in float32 and round once (as an fp16 tensor-core GEMM does), but
not read its operands at bfloat16's 8-bit mantissa; a bfloat16 problem not at an fp8-like
3-bit one; a float64 problem not in float32. Which error separates honest from low
depends on the problem (a sum of K positive products averages rounding errors out as
1/sqrt(K); a softmax scales them by its inputs' size), so one fixed limit either lets the
low precision through on some problems or flags honest arithmetic on others. Each problem
calibrates its own limit per floating output leaf instead, for that leaf's dtype
(``DTYPES``: float64, float32, float16, bfloat16; a complex leaf by its component type):

- in the reference process, which never runs candidate code (``reference.calibrate_precision``
  drives; the pieces are here): the problem's Model in float64 (model and inputs
  ``.double()``, complex ones complex128, the same init and input seeds) is the oracle.
  Against it, the error of ``VARIANTS``: the Model as KernelBench runs it, at its own
  dtypes (``native``); TF32, emulated by rounding every float32 operand (inputs,
  parameters and buffers, and both operands of every contraction: matmul, convolution,
  attention; ``RoundedContractions``) to TF32's 10-bit mantissa, to nearest and toward
  zero, plus on a GPU the model with TF32 allowed; and ``low``, the same emulation with
  every operand of each dtype at that dtype's lower precision (``Precision.low_bits``:
  float64 -> float32's 23 bits, float32 and float16 -> bfloat16's 7, bfloat16 -> fp8
  e4m3's 3).
- the limit rule (``leaf_limit``, harness side): honest = the largest native/TF32 error,
  at least the dtype's floor; when the low error is at least ``ratio`` times it, the limit
  is the geometric mean of ``margin`` x honest and the low error; otherwise the problem
  cannot tell them apart and the fixed limit applies (``fixed_limit``: the configured
  float32 one, scaled to the dtype's low precision), with a warning.
- the verdict (``verdict``, harness side): each floating leaf of *every* compared call of the
  candidate against the oracle's for that call (sampled at the reference entry's secret
  indices when large), by the same error measure, against its limit: every correctness
  trial, the refill (``recheck1``) and the second run (``determinism0``), the last timed
  round (``timed{i}``) and the timed checks (``check{j}``), all at the task's size and its
  limit, and the perturbed size (``pcand``) against its own oracle and its own limit,
  calibrated at that size (errors grow with a contraction's length). A candidate that
  counts calls and answers at low precision on some of them is held to the limit on each:
  no compared call is judged by a looser rule than another.
- small outputs (``small_calls``): a leaf of fewer than ``MIN_ELEMENTS`` values has no
  stable error of its own (a scalar's relative error is one draw of |N(0, s)|: on a given
  input it may come out at 0.01 s or 3 s), so one limit per problem is not set for it,
  and the fixed limit (4e-3 for float32) lets bf16 operands through on a scalar loss. The
  reference process runs every variant on *every* compared call of such a problem and
  sends their values (``small_record``), and each call is judged on its own inputs: the
  honest error there is the honest variants' on those very inputs (at least
  ``POOL_SHARE`` x its RMS over the calls, the dtype's floor and half an ulp of the
  call's values, one rounding of the output), and where the low variant's error on the
  same inputs is past ``margin`` x that, the limit is the geometric mean of the two (else
  those inputs cannot tell them apart: the fixed limit, never below ``margin`` x honest).
  A uniform scale is forgiven as on a large output, but one common to the calls judged
  together (one value's own scale would forgive it everything), and none below
  ``SCALE_MIN_VALUES`` distinct values. Why per call and not pooled: pooling five trials
  of a scalar gives five values, whose RMS error ranges over a factor of ~5 between its
  1st and 99th percentiles (chi-square, 5 degrees of freedom) while bf16 operands sit
  ~8x above TF32 ones: no pooled limit both passes honest TF32 arithmetic and stops bf16.
  On the same inputs the spread cancels: a kernel reading its operands at the low
  precision makes about the low variant's error, an honest one about the honest variants'
  or far less. What it assumes: an honest kernel's error on each call stays within
  ``margin`` x the honest error of those inputs (float32 in another order, TF32 operands
  as the emulation rounds them, half outputs rounded once); a kernel whose error is an
  independent draw at TF32's level (a contraction reassociated, then rounded to TF32)
  may exceed it on a scalar. What it catches: on the CPU shapes (five trials), bf16
  logits behind the built-in cross-entropy's scalar on >= 99 % of draws (rounded to
  nearest; truncated, whose bias the scale allowance forgives, ~97 %), every draw where
  the low variant is far from honest (the fixture task's half-valued logits, a 57-value
  mean).

The error measure (``scaled_error``) is a relative L2 error after the best uniform scale
within ``1 +- SCALE_ALLOWANCE``: truncated TF32 operands shrink every product by ~7e-4 on
average, a bias that would otherwise make honest Triton TF32 look as far off as bf16
rounded to nearest (whose error is unbiased noise, 8x TF32's). No candidate gains by it:
the output must first pass allclose and the per-dtype relative L2 check against the
reference (``correctness.py``). Does not cover: running models (``reference.py``), float8
outputs (their fixed limits are in ``correctness.REL_L2_LIMITS``), the low-mantissa sign of
a narrower type (``guards.precision_flag``).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

import torch

CALIBRATION_CALLS = 2  # compared calls the variants are calibrated on (the first trials; the oracle runs every one)
TF32_BITS, BF16_BITS, FP8_BITS = 10, 7, 3  # explicit mantissa bits (float32 has 23)
SCALE_ALLOWANCE = 2e-3  # a uniform relative scale the error measure forgives (truncated TF32: ~7e-4)
MIN_ELEMENTS = 64  # fewer compared values than this: judged per call against its own inputs' variants (``small_calls``)
POOL_SHARE = 0.5  # a small output's honest allowance on a call: at least this share of its honest error pooled over the calls
SCALE_MIN_VALUES = 4  # a small output's calls hold fewer distinct values than this: no scale is forgiven
HONEST_FLOOR = 1e-6  # the least honest float32 error assumed (float32 arithmetic in another order, approximate exp)


class Precision(NamedTuple):
    """What an output dtype is held to: its explicit mantissa bits, the lower precision its
    operands must not be read at, and the least honest error assumed for it (an exact
    reference, a relu or a copy, has error 0: an honest kernel rounding at other points may not)."""
    bits: int
    low_bits: int
    floor: float


DTYPES = {
    "float64": Precision(52, 23, 1e-12),  # float32 arithmetic: ~1e-7; another summation order: ~1e-15
    "float32": Precision(23, BF16_BITS, HONEST_FLOOR),
    "float16": Precision(10, BF16_BITS, 1e-4),  # one output rounding: ~2e-4 (its ulp is 2^-10 relative)
    "bfloat16": Precision(7, FP8_BITS, 8e-4),  # 8x float16's
}
_TORCH = {torch.float64: "float64", torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
          torch.complex128: "float64", torch.complex64: "float32"}
if hasattr(torch, "complex32"):
    _TORCH[torch.complex32] = "float16"


def dtype_name(dtype) -> Optional[str]:
    """The ``DTYPES`` key a leaf of ``dtype`` is judged by (a complex type's component type),
    or None for a dtype with no calibration (float8, integers)."""
    return _TORCH.get(dtype)


@dataclass(frozen=True)
class Variant:
    """One way of running the problem's Model: how operands of each dtype are rounded."""
    name: str
    bits: tuple = ()  # (dtype name, explicit mantissa bits) pairs; a dtype not named: untouched
    mode: str = "nearest"  # "nearest" (ties to even) | "zero" (truncation)
    double: bool = False  # the float64 oracle
    device_tf32: bool = False  # TF32 allowed in cuBLAS / cuDNN (a GPU only)

    @property
    def rounding(self) -> dict[str, int]:
        return dict(self.bits)


ORACLE = Variant("oracle", double=True)
LOW = "low"  # operands of every dtype at its lower precision (``Precision.low_bits``)
VARIANTS = (Variant("native"), Variant("tf32_nearest", (("float32", TF32_BITS),)),
            Variant("tf32_zero", (("float32", TF32_BITS),), "zero"), Variant("tf32_device", device_tf32=True),
            Variant(LOW, tuple((k, v.low_bits) for k, v in DTYPES.items())))
HONEST = ("native", "tf32_nearest", "tf32_zero", "tf32_device")  # errors an honest kernel may have


# --------------------------------------------------------------------------- rounding (any process)
def round_mantissa(x: torch.Tensor, bits: Optional[int], mode: str = "nearest") -> torch.Tensor:
    """``x`` (any shape) with its values kept to ``bits`` explicit mantissa bits, in its own
    dtype: to nearest (ties to even, as a bfloat16 cast) or toward zero (truncation).
    float64, float32, float16 and bfloat16 (the last two through float32, exactly), complex
    types by their components. NaN/Inf unchanged; a value rounded past the largest finite one
    becomes Inf, as in the narrower type. Any other dtype, ``bits`` None or at least the
    dtype's own, comes back as it is."""
    name = dtype_name(x.dtype)
    if bits is None or name is None or bits >= DTYPES[name].bits:
        return x
    if mode not in ("nearest", "zero"):
        raise ValueError(f"unknown rounding mode {mode!r}")
    if x.is_complex():
        return torch.view_as_complex(round_mantissa(torch.view_as_real(x.resolve_conj()).contiguous(), bits, mode))
    if x.dtype in (torch.float16, torch.bfloat16):
        return round_mantissa(x.float(), bits, mode).to(x.dtype)
    wide = x.dtype == torch.float64
    drop = (52 if wide else 23) - bits
    i = x.contiguous().view(torch.int64 if wide else torch.int32).to(torch.int64)  # (...) bit patterns; no overflow
    if mode == "nearest":
        i = i + ((1 << (drop - 1)) - 1) + ((i >> drop) & 1)  # half an ulp less one, plus the kept lsb
    i = i & ~((1 << drop) - 1)  # the sign bit stays: magnitudes round, two's complement keeps it
    out = (i if wide else i.to(torch.int32)).view(x.dtype).reshape(x.shape)  # (...) x's dtype
    return torch.where(torch.isfinite(x), out, x)


def round_as(x: Any, rounding: dict[str, int], mode: str) -> Any:
    """A tensor rounded to the bits ``rounding`` gives its dtype (``Variant.rounding``); anything else as it is."""
    if isinstance(x, torch.Tensor):
        name = dtype_name(x.dtype)
        return round_mantissa(x, rounding.get(name), mode) if name is not None else x
    return x


def round_tree(args: list, rounding: dict[str, int], mode: str) -> list:
    """A model's positional inputs with floating tensors rounded per dtype (nested lists and tuples too)."""
    if not rounding:
        return list(args)

    def one(a):
        if isinstance(a, (list, tuple)):
            return type(a)(one(v) for v in a)
        return round_as(a, rounding, mode)

    return [one(a) for a in args]


def _to_double(t: torch.Tensor) -> torch.Tensor:
    if t.is_complex():
        return t.to(torch.complex128)
    return t.double() if t.is_floating_point() else t


def double_tree(args: list) -> list:
    """A model's positional inputs with floating tensors in float64, complex ones in complex128 (the oracle's inputs)."""
    def one(a):
        if isinstance(a, torch.Tensor):
            return _to_double(a)
        if isinstance(a, (list, tuple)):
            return type(a)(one(v) for v in a)
        return a

    return [one(a) for a in args]


def double_module(model):
    """The oracle's model: floating parameters and buffers in float64, complex ones in complex128."""
    if not isinstance(model, torch.nn.Module):
        return model
    return model._apply(_to_double)


def round_module_(model, rounding: dict[str, int], mode: str) -> None:
    """Round a module's floating parameters and buffers in place per dtype (no-op for a non-module)."""
    if not rounding or not isinstance(model, torch.nn.Module):
        return
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            r = round_as(t, rounding, mode)
            if r is not t:
                t.copy_(r)


CONTRACTIONS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "matmul",
                          "linear", "_addmm_activation", "einsum", "tensordot", "bilinear"})


def is_contraction(name: str) -> bool:
    """Whether an aten op (its overload packet's name) is done on tensor cores under TF32."""
    return name in CONTRACTIONS or "conv" in name or "attention" in name


class RoundedContractions:
    """A context in which both operands of every contraction are rounded first (per dtype,
    ``rounding``: dtype name -> bits), as a TF32 tensor core (or a bf16 one) reads them: a
    torch dispatch mode, for the trusted reference process only."""

    def __init__(self, rounding: dict[str, int], mode: str):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_map

        def rounded(a):
            return round_as(a, rounding, mode)

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if is_contraction(func.overloadpacket.__name__):
                    args, kwargs = tree_map(rounded, args), tree_map(rounded, kwargs)
                return func(*args, **kwargs)

        self.mode = _Mode() if rounding else contextlib.nullcontext()

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


@contextlib.contextmanager
def arithmetic(variant: Variant, on_gpu: bool):
    """Run a model's forward as ``variant`` computes: TF32 allowed in cuBLAS and cuDNN (the
    flags restored after), contraction operands rounded, or at the model's dtypes as they are."""
    if variant.device_tf32 and on_gpu:
        mm, dnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = True, True
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = mm, dnn
        return
    with RoundedContractions(variant.rounding, variant.mode):
        yield


# --------------------------------------------------------------------------- errors (any process)
def compared_values(leaf: Any, sample_seed: Optional[int]) -> Optional[torch.Tensor]:
    """The values a leaf is judged on, flat (n,), on its device: all of them, or those at the
    secret sample indices when it has more than ``transfer.SAMPLE_MIN`` (as the reference
    entry keeps it); a complex leaf's as their (real, imaginary) pairs. None for a leaf that
    is not a floating or complex tensor."""
    from .transfer import SAMPLE_MIN, sample_indices

    if not isinstance(leaf, torch.Tensor) or not (leaf.is_floating_point() or leaf.is_complex()):
        return None
    flat = leaf.detach().reshape(-1)  # (numel,)
    if sample_seed is not None and flat.numel() > SAMPLE_MIN:
        flat = flat[sample_indices(torch, flat.numel(), sample_seed).to(flat.device)]  # (SAMPLE_N,)
    return torch.view_as_real(flat.resolve_conj()).reshape(-1) if flat.is_complex() else flat  # (n,) or (2n,)


def compared_count(leaf: Any, sample_seed: Optional[int]) -> int:
    """How many values ``compared_values`` judges of ``leaf`` (0 for a leaf that is not floating or complex)."""
    from .transfer import SAMPLE_MIN, SAMPLE_N

    if not isinstance(leaf, torch.Tensor) or not (leaf.is_floating_point() or leaf.is_complex()):
        return 0
    n = leaf.numel() if sample_seed is None or leaf.numel() <= SAMPLE_MIN else SAMPLE_N
    return 2 * n if leaf.is_complex() else n


class Judged(NamedTuple):
    """An output leaf reduced to what is judged of it: its dtype, full shape and values (n,)."""
    dtype: torch.dtype
    shape: tuple
    values: torch.Tensor


def judged(leaf: Any, sample_seed: Optional[int]) -> Optional[Judged]:
    """``leaf`` as a ``Judged`` (a copy of its judged values: the output itself can go), or None
    for a leaf that is not a floating or complex tensor."""
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
    None for a leaf that is not a floating (or complex) tensor of the oracle's shape on every
    trial, or whose oracle is not float64 (complex128)."""
    errs: list[Optional[float]] = []
    for j in range(len(oracle[0]) if oracle else 0):
        worst: Optional[float] = 0.0
        for out, orc in zip(outs, oracle):
            x, o = (out[j] if j < len(out) else None), orc[j]
            if (x is None or o is None or len(out) != len(orc) or dtype_name(x.dtype) is None
                    or o.dtype not in (torch.float64, torch.complex128) or x.shape != o.shape
                    or x.values.numel() != o.values.numel()):
                worst = None
                break
            worst = max(worst, scaled_error(x.values, o.values))
        errs.append(worst)
    return errs


# --------------------------------------------------------------------------- the limit rule (harness)
def honest_error(errors: dict[str, Optional[float]], dtype: str = "float32") -> Optional[float]:
    """The honest error of one leaf: its largest ``HONEST`` variant's, at least ``dtype``'s floor; None without one."""
    honest = [e for k, e in errors.items() if k in HONEST and e is not None]
    return max(max(honest), DTYPES[dtype].floor) if honest else None


def low_name(dtype: str) -> str:
    """The lower precision a ``dtype`` output must not be computed at, in words."""
    return {23: "float32", 7: "bf16", 3: "fp8"}.get(DTYPES[dtype].low_bits, f"{DTYPES[dtype].low_bits}-bit")


def leaf_limit(errors: dict[str, Optional[float]], n: int, margin: float,
               ratio: float, dtype: str = "float32") -> tuple[Optional[float], str]:
    """(limit, why) for one ``dtype`` leaf (a ``DTYPES`` key) from its calibrated errors
    (``HONEST`` names and ``LOW``; a variant not run is None) over ``n`` compared values;
    limit None: not discriminated, ``why`` says so."""
    honest = [e for k, e in errors.items() if k in HONEST and e is not None]
    low = errors.get(LOW)
    if not honest or low is None or not all(math.isfinite(e) for e in honest + [low]):
        return None, f"the {dtype}, TF32 or {low_name(dtype)} runs gave no finite error"
    if n < MIN_ELEMENTS:
        return None, (f"{n} compared values are too few for one limit (at least {MIN_ELEMENTS}) and the variants "
                      "on each call's own inputs are missing")
    h = honest_error(errors, dtype)
    if low < ratio * h:
        return None, (f"{low_name(dtype)} operands ({low:.2g}) are not {ratio:g}x less accurate than "
                      f"{dtype}{'/TF32' if dtype == 'float32' else ''} ({h:.2g})")
    return math.sqrt(margin * h * low), "calibrated"


def uncalibrated_limit(errors: dict[str, Optional[float]], dtype: str, fixed: float, margin: float) -> float:
    """The limit of a leaf that is not calibrated: ``fixed_limit``, and never below ``margin``
    times the honest variants' error where the oracle measured one (a problem whose honest
    arithmetic errs near the fixed figure, where bf16 operands cannot be told apart, would
    otherwise fail honest kernels that sum in another order), as for small outputs."""
    h = honest_error(errors, dtype)
    lim = fixed_limit(dtype, fixed)
    return max(lim, margin * h) if h is not None and math.isfinite(h) else lim


def fixed_limit(dtype: str, fixed: float) -> float:
    """The relative-L2 limit against the reference where a ``dtype`` leaf cannot be calibrated:
    ``fixed`` (``EvalConfig.precision_rel_l2``, set for float32 at about bf16 operands'
    error) scaled by the dtype's low precision (float16: the same; bfloat16: 16x, above
    the correctness check's own; float64: 2^-16x, about float32 operands' error)."""
    return fixed * 2.0 ** (BF16_BITS - DTYPES[dtype].low_bits)


def calibration_record(result: Optional[dict]) -> Optional[dict]:
    """The reference process's calibration reply as it is kept: {"trials", "n", "errors",
    "oracles"} with per-leaf lists, and "small" where an output has fewer than
    ``MIN_ELEMENTS`` values (``small_record``), or {"error"}; None when there is none."""
    if not isinstance(result, dict):
        return None
    if "error" in result:
        return {"error": str(result["error"])[:300]}
    rec = {"trials": int(result.get("trials", 0)), "n": list(result.get("n", [])),
           "errors": {k: list(v) for k, v in (result.get("errors") or {}).items()},
           "oracles": [str(k) for k in result.get("oracles") or []]}
    small = _small_kept(result.get("small"))
    if small:
        rec["small"] = small
    return rec


# --------------------------------------------------------------------------- small outputs (any process)
def small_record(keys: list[str], outs: dict[str, list]) -> dict:
    """The values of each small output leaf (fewer than ``MIN_ELEMENTS`` judged values) of
    every variant on every compared call, as the reference process sends them: {oracle file
    key: {variant name: per leaf, its values as floats, or None for a leaf that is not
    small}}. ``keys``: the calls' oracle keys; ``outs``: per variant name, per call, the
    leaves as ``judged`` gives them."""
    rec: dict = {}
    for i, key in enumerate(keys):
        rec[key] = {name: [None if x is None or x.values.numel() >= MIN_ELEMENTS else
                           [float(v) for v in x.values.double().tolist()] for x in got[i]]
                    for name, got in outs.items()}
    return rec


def _small_kept(small: Any) -> Optional[dict]:
    """A reference reply's ``small`` record as it is kept (strings, lists of floats and None
    only), or None for anything else (the fixed limit then applies to small outputs)."""
    if not isinstance(small, dict):
        return None
    kept: dict = {}
    try:
        for key, variants in small.items():
            if not isinstance(variants, dict):
                return None
            kept[str(key)] = {str(name): [None if not isinstance(v, list) else [float(x) for x in v] for v in leaves]
                              for name, leaves in variants.items() if isinstance(leaves, list)}
    except (TypeError, ValueError):
        return None
    return kept


class SmallCall(NamedTuple):
    """One compared call of a small output leaf judged against the variants on its own inputs:
    errors relative to the oracle's RMS norm over the calls judged together."""
    error: float  # the candidate's
    limit: float
    honest: float  # the honest error on these inputs (at least the floors)
    low: float  # the ``LOW`` variant's on these inputs
    calibrated: bool  # the low variant is past the honest allowance here; else ``limit`` is the fixed one


def small_calls(cand: list[torch.Tensor], oracle: list[torch.Tensor], variants: list[dict[str, torch.Tensor]],
                dtype: str, margin: float, fixed: float) -> Optional[list[SmallCall]]:
    """Per compared call of one small output leaf (fewer than ``MIN_ELEMENTS`` values), the
    candidate's error and its limit on that call's own inputs. ``cand``, ``oracle``: per
    call the values (n,) (the oracle's float64); ``variants``: per call, variant name ->
    that variant's values (n,) on the same inputs (the ``HONEST`` ones run, and ``LOW``).

    Every series (the candidate's, each variant's) is first forgiven one uniform scale within
    1 +- ``SCALE_ALLOWANCE`` common to all the calls (not one per call: one value's own scale
    would forgive it everything), where they hold at least ``SCALE_MIN_VALUES`` distinct
    values (the refill and the second run repeat a trial's inputs); its error on a call is
    then ||x - s o|| over the oracle's RMS norm over the calls (a call whose exact value is
    near zero does not blow up). The honest error on a call is the largest of: the honest
    variants' error on those inputs, ``POOL_SHARE`` x that error pooled (RMS) over the
    calls, the dtype's floor and half an ulp of the call's own values (one rounding of the
    output); ``margin`` x that is the honest allowance. Where the low variant's error on
    the same inputs is past the allowance, the limit is the geometric mean of the two
    (``leaf_limit``'s, never below the allowance); else those inputs cannot tell low from
    honest and the fixed limit applies (``fixed_limit``), never below the allowance
    either. None when a variant is missing or not finite on a call."""
    k = len(oracle)
    if k == 0 or len(cand) != k or len(variants) != k:
        return None
    o = [t.reshape(-1).to(torch.float64) for t in oracle]  # per call (n,)
    oo = sum(float(t @ t) for t in o)
    norm = math.sqrt(oo / k) if oo > 0 else 1.0  # the oracle's RMS norm per call
    distinct: list[torch.Tensor] = []
    for t in o:
        if not any(t.shape == d.shape and torch.equal(t, d) for d in distinct):
            distinct.append(t)
    scaled = oo > 0 and sum(t.numel() for t in distinct) >= SCALE_MIN_VALUES

    def residuals(xs: list) -> list[float]:
        xs = [x.reshape(-1).to(device=o[0].device, dtype=torch.float64) for x in xs]  # per call (n,)
        if any(x.numel() != t.numel() for x, t in zip(xs, o)):
            return [math.inf] * k
        if not all(bool(torch.isfinite(x).all()) for x in xs):
            return [math.inf] * k
        s = 1.0
        if scaled:
            s = min(max(sum(float(x @ t) for x, t in zip(xs, o)) / oo, 1.0 - SCALE_ALLOWANCE), 1.0 + SCALE_ALLOWANCE)
        return [float(torch.linalg.vector_norm(x - s * t)) / norm for x, t in zip(xs, o)]

    names = [n for n in HONEST if all(v.get(n) is not None for v in variants)]
    if not names or not all(v.get(LOW) is not None for v in variants):
        return None
    honest = [max(e) for e in zip(*(residuals([v[n] for v in variants]) for n in names))]
    low = residuals([v[LOW] for v in variants])
    if not all(math.isfinite(e) for e in honest + low):
        return None
    pooled = math.sqrt(sum(h * h for h in honest) / k)
    spec = DTYPES[dtype]
    errs = residuals(cand)
    out = []
    for e, h, lo, t in zip(errs, honest, low, o):
        ulp = 2.0 ** -(spec.bits + 1) * float(torch.linalg.vector_norm(t)) / norm  # one rounding of the output
        base = max(h, POOL_SHARE * pooled, spec.floor, ulp)
        told = lo > margin * base
        limit = math.sqrt(margin * base * lo) if told else max(fixed_limit(dtype, fixed), margin * base)
        out.append(SmallCall(e, limit, base, lo, told))
    return out


# --------------------------------------------------------------------------- the verdict (harness)
@dataclass
class LeafVerdict:
    """One floating output leaf judged: its worst error over the compared calls and the limit it is held to."""
    output: int  # the leaf's index in the flattened outputs
    error: float
    limit: float
    measure: str  # "oracle": scaled_error against the float64 oracle, calibrated limit;
    #               "reference": relative L2 against the reference, the fixed limit
    honest: Optional[float] = None  # the calibrated honest (native/TF32) error ("oracle" only)
    low: Optional[float] = None  # the calibrated low-precision-operand error ("oracle" only)
    note: str = ""  # why the fixed limit applies
    call: str = ""  # the compared call with the worst error (its output key: cand0, check1, pcand, ...)
    size: str = "task"  # "task" | "perturbed": which size's limit
    dtype: str = "float32"  # the ``DTYPES`` key it is judged by (a complex leaf: its component type)


@dataclass
class PrecisionVerdict:
    leaves: list[LeafVerdict]
    warnings: list[str]
    oracle_calls: int = 0  # compared calls judged against the float64 oracle

    def record(self) -> Optional[dict]:
        """What ``EvalResult.precision`` keeps; None when no output is floating."""
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


def _dtype(leaf: Any) -> Optional[str]:
    """The ``DTYPES`` key of a reference leaf (a tensor or a sample), None for any other leaf."""
    t = leaf.get("values") if isinstance(leaf, dict) else leaf
    return dtype_name(t.dtype) if isinstance(t, torch.Tensor) else None


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


class Compared(NamedTuple):
    """A compared call as the reference entry holds it."""
    size: str  # "task" | "perturbed": whose limits
    oracle_key: str  # its oracle's file key in the calibration record (``oracle{i}``, ``voracle{j}``, ``poracle``)
    oracle: Any  # its oracle's leaves, or None
    ref: Any  # its reference's leaves


def compared_call(entry: dict, key: str) -> Optional[Compared]:
    """The compared call whose output is ``key``, or None for a key that is no compared call.
    Trials, the last timed round and the timed checks share the task's limit; the refill and
    the second run are trial 1's and trial 0's inputs; ``pcand`` is the perturbed size's."""
    refs, oracle = entry.get("refs") or [], entry.get("oracle") or []
    vrefs, voracle = entry.get("vrefs") or [], entry.get("voracle") or []

    def at(xs, i):
        return xs[i] if i is not None and 0 <= i < len(xs) else None

    if key == "pcand":
        return Compared("perturbed", "poracle", entry.get("poracle"), entry["pref"]) \
            if entry.get("pref") is not None else None
    i = {"recheck1": 1, "determinism0": 0}.get(key)
    i = i if i is not None else (_index(key, "cand") if key.startswith("cand") else _index(key, "timed"))
    if i is not None and at(refs, i) is not None:
        return Compared("task", f"oracle{i}", at(oracle, i), refs[i])
    j = _index(key, "check")
    if j is not None and at(vrefs, j) is not None:
        return Compared("task", f"voracle{j}", at(voracle, j), vrefs[j])
    return None


def _small_verdict(j: int, todo: list, calib: dict, dtype: str, margin: float, fixed: float,
                   size: str) -> Optional[tuple[LeafVerdict, bool]]:
    """Leaf ``j`` of fewer than ``MIN_ELEMENTS`` values judged call by call against the
    variants on each call's own inputs (``small_calls``): its worst call's error and limit,
    and whether any call could tell low from honest; None where the calibration has no such
    record for every call (the fixed limit then applies to the leaf)."""
    small = calib.get("small") or {}
    xs, os, vs = [], [], []
    for _, okey, o, t in todo:
        rec = small.get(okey) or {}
        got = {name: leaves[j] for name, leaves in rec.items() if j < len(leaves) and leaves[j] is not None}
        (ko, vo), (kx, vx) = _flat(o[j]) if j < len(o) else (None, None), _flat(t[j]) if j < len(t) else (None, None)
        if LOW not in got or ko is None or ko[0] != "tensor" or ko != kx or vo.numel() != vx.numel():
            return None
        if any(len(v) != vo.numel() for v in got.values()):
            return None
        xs.append(vx)
        os.append(vo)
        vs.append({name: torch.tensor(v, dtype=torch.float64) for name, v in got.items()})
    calls = small_calls(xs, os, vs, dtype, margin, fixed)
    if calls is None:
        return None
    worst = max(range(len(calls)), key=lambda i: calls[i].error / calls[i].limit)  # limits are > 0 (the floors)
    c = calls[worst]
    note = f"fewer than {MIN_ELEMENTS} values: judged on each call's own inputs" + \
        ("" if c.calibrated else " (this call: the fixed limit)")
    return LeafVerdict(j, c.error, c.limit, "oracle", honest=c.honest, low=c.low, call=todo[worst][0], size=size,
                       dtype=dtype, note=note), any(x.calibrated for x in calls)


def verdict(entry: dict, cand: dict, margin: float, ratio: float, fixed: float) -> PrecisionVerdict:
    """Every floating output leaf of every compared call in ``cand`` (key -> leaves read by the
    harness: ``cand{i}``, ``recheck1``, ``determinism0``, ``pcand``, ``timed{i}``,
    ``check{j}``): against the float64 oracle of that call and its size's calibrated limit
    where the reference entry has them, else against the reference and the ``fixed``
    limit scaled to the leaf's dtype (``fixed_limit``, with a warning); a leaf of fewer than
    ``MIN_ELEMENTS`` values call by call against the variants on its own inputs
    (``small_calls``). ``entry``: the reference cache entry (``refs``,
    ``oracle``, ``voracle``, ``precision``; ``pref``, ``poracle``, ``pprecision``). A leaf's
    verdict is its worst call's: one call at low precision fails it."""
    calls: dict[str, list] = {"task": [], "perturbed": []}
    for key in sorted(cand):
        got = compared_call(entry, key)
        if got is not None:
            calls[got.size].append((key, got.oracle_key, got.oracle, got.ref, cand[key] or []))
    leaves, why_not, on_oracle = [], [], 0
    for size, calib in (("task", entry.get("precision") or {}), ("perturbed", entry.get("pprecision") or {})):
        todo = calls[size]
        if not todo:
            continue
        template = todo[0][3]
        usable = "errors" in calib and all(o is not None for _, _, o, _, _ in todo)
        on_oracle += len(todo) if usable else 0
        for j, r0 in enumerate(template):
            dtype = _dtype(r0)
            if dtype is None:
                continue
            errs = {k: (v[j] if j < len(v) else None) for k, v in (calib.get("errors") or {}).items()}
            n = calib.get("n", [])
            n_j = int(n[j] or 0) if j < len(n) else 0
            if usable and n_j < MIN_ELEMENTS:  # too few values for one limit: each call against its own inputs
                got = _small_verdict(j, [(k, ok, o, t) for k, ok, o, _, t in todo], calib, dtype, margin, fixed,
                                     size)
                if got is not None:
                    leaves.append(got[0])
                    if not got[1]:
                        why_not.append(f"{size} size, output {j} ({dtype}, {n_j} values): {low_name(dtype)} "
                                       "operands stayed within the honest allowance on every call's own inputs")
                    continue
            limit, why = (leaf_limit(errs, n_j, margin, ratio, dtype) if usable else
                          (None, "no float64 oracle" + (f" ({calib['error']})" if calib.get("error") else "")))
            if limit is not None:
                err, where = _worst([(k, o[j], t[j]) for k, _, o, _, t in todo if j < len(o) and j < len(t)],
                                    scaled_error)
                leaves.append(LeafVerdict(j, err, limit, "oracle", honest=honest_error(errs, dtype), low=errs[LOW],
                                          call=where, size=size, dtype=dtype))
            else:
                lim = uncalibrated_limit(errs, dtype, fixed, margin) if usable and n_j >= MIN_ELEMENTS \
                    else fixed_limit(dtype, fixed)  # a few values' calibrated error is no measure of honesty
                err, where = _worst([(k, r[j], t[j]) for k, _, _, r, t in todo if j < len(r) and j < len(t)], rel_l2)
                leaves.append(LeafVerdict(j, err, lim, "reference", note=why, call=where, size=size, dtype=dtype))
                why_not.append(f"{size} size, output {j} ({dtype}, fixed limit {lim:.2g}): {why}")
    warnings = [f"precision_uncalibrated: lower-precision operands could not be told from honest arithmetic "
                f"({'; '.join(why_not)[:300]}); the fixed limit applies"] if why_not else []
    return PrecisionVerdict(leaves, warnings, on_oracle)
