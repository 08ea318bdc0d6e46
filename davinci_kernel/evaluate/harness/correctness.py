"""Comparing candidate outputs with reference outputs, in the harness process.

Covers: structure, shape and dtype agreement, NaN/Inf (never pass), allclose with the
configured tolerances, a relative L2 check per output with a limit per dtype
(``REL_L2_LIMITS``: catches outputs that pass allclose only because their values are
small next to ``atol``, such as an all-zeros softmax over a wide row, and outputs
whose small values hide behind a larger sibling output), exact comparison of integer,
bool and exponent-only types, complex outputs through their real view, and the error
statistics the feedback and the precision guard use (max abs/rel difference, relative
L2 error computed in float64, the share of an output's values a narrower type holds exactly,
``LOW_MANTISSA``, on both sides). Any leaf it cannot compare (a dtype the transfer does
not carry, a sparse, quantized, nested or meta tensor, an object that is neither a
tensor nor a scalar) makes the comparison fail with ``unsupported_output``; it never
counts as equal. Inputs are plain CPU tensors rebuilt from raw bytes (transfer.py), so
nothing the candidate made can change how this code behaves. Does not cover: producing
the outputs (candidate.py, reference.py) or carrying them across processes (transfer.py).
"""

from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Optional

import torch


@dataclass(frozen=True)
class Limit:
    """How far one floating output may be from the reference, beyond allclose.

    ``||out - ref||_2 <= rel_l2 * ||ref||_2 + floor * sqrt(n)`` over the output's n values
    (its real view for complex outputs). ``floor`` is an RMS error allowed whatever the
    reference's size, so an output that is zero or cancellation noise in the reference
    (where a relative error means nothing) is left to allclose; it sits far below the
    values of any output that carries signal (a softmax over a row of N values has RMS
    ~1.6/N: 1e-5 still catches zeros for rows up to ~1.6e5 wide). ``min_rtol`` widens the
    elementwise rtol for types whose one ulp is coarser than the configured rtol."""
    rel_l2: float
    floor: float
    min_rtol: float = 0.0


# Real dtype name -> limit. Honest kernels measured against torch (CPU, 2.13; fp32
# accumulation, one rounding at the end): one matmul or softmax 1e-5 to 1e-3, a
# matmul-gelu-matmul chain rounded at other points 4e-4 (fp16) / 3.4e-3 (bf16: eight times
# fp16's epsilon); KernelBench accepts half-precision kernels at rel-L2 ~1e-3. An output
# with no signal has rel-L2 ~1 (zeros) or ~1.4 (uncorrelated values). float32/float64 get
# the allclose rtol's 1e-2. These limits only reject outputs with no signal: how accurate a
# float64/32/16 or bfloat16 output must be is the precision guard's call (precision.py: a
# limit calibrated per problem and dtype against a float64 oracle), not this one's. float8: one ulp is 6 % (e4m3) or
# 12 % (e5m2) of a value, so honest outputs differ by it on many elements.
REL_L2_LIMITS: dict[str, Limit] = {
    "float64": Limit(1e-2, 1e-5),
    "float32": Limit(1e-2, 1e-5),
    "float16": Limit(1e-2, 1e-5),
    "bfloat16": Limit(5e-2, 1e-5),
    "float8_e4m3fn": Limit(0.2, 1e-3, 0.125),
    "float8_e4m3fnuz": Limit(0.2, 1e-3, 0.125),
    "float8_e5m2": Limit(0.35, 1e-5, 0.25),
    "float8_e5m2fnuz": Limit(0.35, 1e-5, 0.25),
}

# Compared bit for bit (through a signed integer view of the same size, which every
# integer op supports): integers, bool, and float8_e8m0fnu (a power-of-two scale, one ulp = 2x).
_EXACT = {
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8,
    "uint64": torch.int64, "uint32": torch.int32, "uint16": torch.int16, "uint8": torch.uint8,
    "bool": torch.bool, "float8_e8m0fnu": torch.uint8,
}


@dataclass
class Comparison:
    ok: bool = True
    error_kind: Optional[str] = None
    message: str = ""
    max_abs: float = 0.0
    max_rel: float = 0.0
    rel_l2: float = 0.0  # over all floating outputs together
    leaf_rel_l2: dict[str, float] = field(default_factory=dict)  # real dtype -> worst rel-L2 of one output
    float32: bool = False  # any float32 output, complex64 included
    low_mantissa_share: float = 0.0  # the largest share, over outputs, of nonzero values a narrower type holds
    ref_low_mantissa_share: float = 0.0  # the same share of the reference's own outputs


def _name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _uncomparable(leaf: Any) -> Optional[str]:
    """Why the harness cannot compare this leaf, or None. Leaves are tensors or the
    descriptions transfer.read_leaf returns for anything else."""
    if isinstance(leaf, torch.Tensor):
        if leaf.is_nested:
            return "a nested tensor"
        if leaf.layout != torch.strided:
            return f"a tensor with layout {_name(leaf.layout)} (only dense tensors are compared)"
        if leaf.is_quantized:
            return f"a quantized tensor ({_name(leaf.dtype)})"
        if leaf.device.type == "meta":
            return "a meta tensor (it holds no values)"
        name = _name(leaf.dtype)
        if name not in _EXACT and _real_name(leaf.dtype) not in REL_L2_LIMITS:
            return f"a {name} tensor (no comparison for this dtype)"
        return None
    if isinstance(leaf, dict) and leaf.get("kind") == "scalar":
        return None
    if isinstance(leaf, dict) and leaf.get("kind") == "unsupported":
        what = leaf.get("why") or f"a {leaf.get('dtype', '?')} output the transfer does not carry"
        return what + (f", shape {tuple(leaf['shape'])}" if isinstance(leaf.get("shape"), list) else "")
    if isinstance(leaf, dict) and leaf.get("kind") == "invalid":
        return f"an invalid output ({leaf.get('why', 'refused on arrival')})"
    return f"an object of type {type(leaf).__name__}"


def _real_name(dtype) -> str:
    """The dtype compared: a complex type's component type, any other type itself."""
    return {torch.complex64: "float32", torch.complex128: "float64",
            getattr(torch, "complex32", None): "float16"}.get(dtype, _name(dtype))


def _real(t: torch.Tensor) -> torch.Tensor:
    """A complex tensor as its (..., 2) real view; any other tensor as it is."""
    if t.is_complex():
        return torch.view_as_real(t.resolve_conj())
    return t


# Real dtype -> (an integer view of its size, the low mantissa bits a narrower type lacks):
# float32 held in 10 mantissa bits (float16, TF32; bf16's 7 too), float16 in bf16's 7,
# bfloat16 in fp8 e4m3's 3, float64 in float32's 23.
LOW_MANTISSA = {"float32": (torch.int32, 13), "float16": (torch.int16, 3), "bfloat16": (torch.int16, 4),
                "float64": (torch.int64, 29)}


def _low_mantissa_share(t: torch.Tensor) -> float:
    """Share of a floating tensor's nonzero values whose low mantissa bits (``LOW_MANTISSA``)
    are zero (values a narrower type holds exactly); 0 under 64 nonzero values or for a dtype
    without an entry. Read from the bits in place (a value is nonzero when a bit other than
    the sign's is set: NaN counts, -0.0 does not), without gathering the nonzero values first."""
    view = LOW_MANTISSA.get(_name(t.dtype))
    if view is None:
        return 0.0
    itype, low = view
    bits = t.contiguous().view(itype)
    nonzero = (bits & ((1 << (torch.iinfo(itype).bits - 1)) - 1)) != 0
    n = int(nonzero.sum())
    if n < 64:
        return 0.0
    zeros = int((((bits & ((1 << low) - 1)) == 0) & nonzero).sum())
    return float(torch.tensor(zeros / n, dtype=torch.float32))  # as a float32 mean of the flags gave it


class _RefFacts:
    """What a comparison reads of a reference leaf alone (its float32 low-mantissa share, its
    float64 L2 norm), computed once per leaf: a reference entry's leaves are compared with
    every candidate of the task and never change (mapped files nobody writes). Only leaves
    registered as such (``remember``: the reference cache's) are kept, by the object's
    identity while it lives (a dead leaf's id may come again); any other leaf's facts are
    computed at each comparison."""

    def __init__(self, most: int = 8192):
        self._facts: dict[int, tuple[weakref.ref, dict]] = {}
        self._lock = threading.Lock()
        self.most = most

    def remember(self, leaf: Any) -> None:
        """Keep the facts of ``leaf`` (a reference tensor nobody will change) once computed."""
        if not isinstance(leaf, torch.Tensor):
            return
        with self._lock:
            if len(self._facts) >= self.most:  # leaves of entries gone, then the oldest
                self._facts = {k: v for k, v in self._facts.items() if v[0]() is not None}
                while len(self._facts) >= self.most:
                    self._facts.pop(next(iter(self._facts)))
            got = self._facts.get(id(leaf))
            if got is None or got[0]() is not leaf:
                self._facts[id(leaf)] = (weakref.ref(leaf), {})

    def get(self, leaf: Any) -> Optional[dict]:
        with self._lock:
            got = self._facts.get(id(leaf))
            return got[1] if got is not None and got[0]() is leaf else None


REFERENCE_FACTS = _RefFacts()


def _fact(leaf: torch.Tensor, name: str, compute) -> Any:
    """``compute()``, once per remembered reference leaf (``REFERENCE_FACTS``)."""
    facts = REFERENCE_FACTS.get(leaf)
    if facts is None:
        return compute()
    if name not in facts:
        facts[name] = compute()
    return facts[name]


def _scalars_equal(a, b, atol: float, rtol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isfinite(a) and math.isfinite(b) and abs(b - a) <= atol + rtol * abs(a)
    return type(a) is type(b) and a == b


def compare(ref: list, cand: list, atol: float, rtol: float,
            limits: Optional[dict[str, Limit]] = None) -> Comparison:
    """Compare leaf lists (tensors or scalar descriptions) from one call each.

    ``limits``: real dtype name -> Limit; ``REL_L2_LIMITS`` when None."""
    limits = REL_L2_LIMITS if limits is None else limits
    c = Comparison()
    if len(ref) != len(cand):
        c.ok, c.error_kind = False, "output_structure"
        c.message = f"expected {len(ref)} output tensor(s), got {len(cand)}"
        return c

    def fail(kind: str, message: str) -> None:  # the first failure names the error
        if c.ok:
            c.ok, c.error_kind, c.message = False, kind, message

    sq_err, sq_ref = 0.0, 0.0
    for i, (r, x) in enumerate(zip(ref, cand)):
        where = f"output {i}" if len(ref) > 1 else "output"
        why_r, why_x = _uncomparable(r), _uncomparable(x)
        if why_r:
            fail("unsupported_output", f"{where}: the reference output is {why_r}, which the harness "
                 "cannot compare: this task cannot be judged")
            return c
        if why_x:
            want = f" ({_name(r.dtype)})" if isinstance(r, torch.Tensor) else ""
            fail("unsupported_output", f"{where}: got {why_x}, which the harness cannot compare; "
                 f"return a dense tensor of the reference's dtype{want}")
            return c
        if not isinstance(r, torch.Tensor):
            if isinstance(x, torch.Tensor) or not _scalars_equal(r.get("value"), x.get("value"), atol, rtol):
                fail("wrong_output", f"{where}: expected {r.get('value')!r}, got "
                     f"{'a tensor' if isinstance(x, torch.Tensor) else repr(x.get('value'))}")
                return c
            continue
        if not isinstance(x, torch.Tensor):
            fail("output_structure", f"{where}: expected a tensor, got {x.get('kind')} {x.get('value', '')!r}")
            return c
        if tuple(r.shape) != tuple(x.shape):
            fail("shape_mismatch", f"{where}: expected shape {tuple(r.shape)}, got {tuple(x.shape)}")
            return c
        if r.dtype != x.dtype:
            fail("dtype_mismatch", f"{where}: expected dtype {_name(r.dtype)}, got {_name(x.dtype)}")
            return c
        name = _name(r.dtype)
        if name in _EXACT:
            rb, xb = r.view(_EXACT[name]), x.view(_EXACT[name])  # same bits, ops every integer type has
            if not torch.equal(rb, xb):
                fail("wrong_output", f"{where}: {int((rb != xb).sum())} of {x.numel()} values differ "
                     "(exact match required)")
            continue
        real = _real_name(r.dtype)
        leaf = r  # the reference leaf as the entry holds it: what its own facts are kept by
        r, x = _real(r), _real(x)  # (..., 2) for complex
        c.float32 = c.float32 or real == "float32"
        c.low_mantissa_share = max(c.low_mantissa_share, _low_mantissa_share(x))
        c.ref_low_mantissa_share = max(c.ref_low_mantissa_share,
                                       _fact(leaf, "low_mantissa", lambda r=r: _low_mantissa_share(r)))
        if r.numel() == 0:
            continue
        # float8 / half / float32 → float32 for the arithmetic; float64 stays float64
        rf, xf = (r, x) if r.dtype == torch.float64 else (r.float(), x.float())
        if not torch.isfinite(xf).all():
            bad = int((~torch.isfinite(xf)).sum())
            fail("nan_inf", f"{where}: {bad} of {x.numel()} values are NaN/Inf")
            return c
        lim = limits.get(real) or REL_L2_LIMITS[real]
        rt = max(rtol, lim.min_rtol)
        diff = (xf - rf).abs()
        ref_abs = rf.abs()
        bad_mask = ~(diff <= atol + rt * ref_abs)  # NaN in the reference counts as a mismatch
        c.max_abs = max(c.max_abs, float(torch.nan_to_num(diff, nan=float("inf")).max()))
        c.max_rel = max(c.max_rel, float(torch.nan_to_num(diff / ref_abs.clamp_min(1e-6), nan=float("inf")).max()))
        del ref_abs
        err = float(torch.linalg.vector_norm(diff, dtype=torch.float64))  # ||out - ref||_2
        norm = _fact(leaf, "norm", lambda rf=rf: float(torch.linalg.vector_norm(rf, dtype=torch.float64)))  # ||ref||_2
        sq_err, sq_ref = sq_err + err ** 2, sq_ref + norm ** 2
        leaf_l2 = err / norm if norm > 0 else (0.0 if err == 0 else float("inf"))
        if not math.isnan(leaf_l2):  # NaN: the reference has NaN/Inf, which allclose reports
            c.leaf_rel_l2[real] = max(c.leaf_rel_l2.get(real, 0.0), leaf_l2)
        n_bad = int(bad_mask.sum()) if bool(bad_mask.any()) else 0
        if n_bad:
            fail("wrong_output", f"{where}: {n_bad} of {x.numel()} values differ beyond atol={atol:g}, rtol={rt:g} "
                 f"(max abs diff {c.max_abs:.3g}, max rel diff {c.max_rel:.3g})")
        elif not err <= lim.rel_l2 * norm + lim.floor * math.sqrt(r.numel()):
            signal = float(torch.linalg.vector_norm(xf, dtype=torch.float64)) / norm if norm > 0 else float("inf")
            hint = (f"; the output carries almost none of the reference's signal (||out||/||ref|| = {signal:.2g})"
                    if leaf_l2 >= 0.5 else "")
            fail("wrong_output", f"{where}: relative L2 error {leaf_l2:.3g} > {lim.rel_l2:g} allowed for "
                 f"{name} ({x.numel()} values within atol={atol:g}, rtol={rt:g} one by one, but "
                 f"||out - ref|| = {err:.3g} against ||ref|| = {norm:.3g}){hint}")
    c.rel_l2 = (sq_err ** 0.5) / (sq_ref ** 0.5) if sq_ref > 0 else (0.0 if sq_err == 0 else float("inf"))
    return c
