"""Small outputs (fewer than ``precision.MIN_ELEMENTS`` values) held to the problem's
precision: each compared call judged against the variants on its own inputs
(``precision.small_calls``) at odd sizes (1, 3, 57, 63) and every floating dtype, the
verdict's routing by size (63 per call, 64 and 65 by the one limit), the common scale, the
fixed limit where low cannot be told from honest, the records; and honest kernels with
small outputs passing the real evaluator: a scalar loss summed in another order, tree
reductions, Kahan-free sums over a large N (per lane, and by atomics), float16 and bfloat16
outputs (the cheating fixtures ``precision_bf16_scalar_loss`` and
``precision_bf16_small_mean`` run in test_evaluate_cheats.py)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import fixture_task

from davinci_kernel.evaluate.harness import guards
from davinci_kernel.evaluate.shared import precision as pr
from davinci_kernel.records import Task
from davinci_kernel.tasks import REFERENCE_DIR, candidate_path, load_suite

DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
MARGIN, RATIO, FIXED = 2.0, 4.0, 4e-3


# --------------------------------------------------------------------------- synthetic problems
def _series(n: int, name: str, seed: int, calls: int = 5, terms: int = 8) -> list[tuple]:
    """Per call (oracle (n,) float64, {variant: (n,)}, {candidate: (n,)}) of a problem with
    ``n`` outputs of dtype ``name``: each the sum of ``terms`` differences a - b of its
    inputs with b within 10 % of a (the cancellation makes the inputs' rounding show).
    Variants as the reference process runs them (inputs rounded per ``precision.VARIANTS``,
    the arithmetic in float32, float64 for a float64 problem, one rounding to the dtype);
    candidates summing in the other order: honest (the inputs as they are), TF32 (truncated,
    as a GPU's tl.dot reads float32), and the inputs at the dtype's lower precision, to
    nearest and truncated."""
    g = torch.Generator().manual_seed(seed)
    dt = DTYPES[name]
    acc = torch.float64 if dt == torch.float64 else torch.float32
    tf32 = pr.TF32_BITS if dt == torch.float32 else None
    low = pr.DTYPES[name].low_bits
    out = []
    for _ in range(calls):
        a = torch.randn(n, terms, generator=g, dtype=torch.float64)
        b = (a + 0.1 * torch.randn(n, terms, generator=g, dtype=torch.float64)).to(dt)
        a = a.to(dt)

        def run(bits, mode="nearest", flip=False, a=a, b=b):
            d = pr.round_mantissa(a, bits, mode).to(acc) - pr.round_mantissa(b, bits, mode).to(acc)  # (n, terms)
            return (d.flip(1) if flip else d).sum(1).to(dt)  # (n,)

        variants = {"native": run(None), "tf32_nearest": run(tf32), "tf32_zero": run(tf32, "zero"), "low": run(low)}
        cands = {"honest": run(None, flip=True), "tf32": run(tf32, "zero", True), "low": run(low, flip=True),
                 "low_truncated": run(low, "zero", True)}
        out.append(((a.double() - b.double()).sum(1), variants, cands))
    return out


def _judge(series: list[tuple], cand: str) -> list:
    """``small_calls`` over the series' calls as the harness compares them: every trial, then
    the refill and the second run (trial 1's and trial 0's inputs again)."""
    order = list(range(len(series))) + [1, 0]
    return pr.small_calls([series[i][2][cand] for i in order], [series[i][0] for i in order],
                          [series[i][1] for i in order], pr.dtype_name(series[0][2][cand].dtype), MARGIN, FIXED)


@pytest.mark.parametrize("name", list(DTYPES))
@pytest.mark.parametrize("n", [1, 3, 57, 63])
def test_small_outputs_pass_honest_and_catch_low_operands(n, name):
    """Honest arithmetic in another order, and TF32 operands for float32, stay within every
    call's limit; operands at the dtype's lower precision (float64 -> float32, float32 and
    float16 -> bf16, bfloat16 -> fp8), to nearest or truncated, exceed it on some call."""
    for seed in range(4):
        series = _series(n, name, seed)
        for cand in ("honest", "tf32"):
            calls = _judge(series, cand)
            assert calls is not None and all(c.error <= c.limit for c in calls), (cand, seed, calls)
        for cand in ("low", "low_truncated"):
            calls = _judge(series, cand)
            assert any(c.error > c.limit for c in calls), (cand, seed, calls)
            assert any(c.calibrated for c in calls)


def test_small_limit_is_the_geometric_mean_on_the_calls_own_inputs():
    o = [torch.tensor([1.0], dtype=torch.float64), torch.tensor([-2.0], dtype=torch.float64)]
    variants = [{"native": x * (1 + 1e-7), "tf32_nearest": x * (1 + 1e-5), "low": x * (1 + 4e-4)} for x in o]
    calls = pr.small_calls([x.float() for x in o], o, variants, "float32", MARGIN, FIXED)
    norm = math.sqrt((1 + 4) / 2)  # the oracle's RMS norm per call
    assert len(calls) == 2 and all(c.calibrated for c in calls)
    for c, x in zip(calls, (1.0, 2.0)):
        honest, low = 1e-5 * x / norm, 4e-4 * x / norm  # errors relative to the RMS norm
        assert c.honest == pytest.approx(honest, rel=1e-3) and c.low == pytest.approx(low, rel=1e-3)
        assert c.limit == pytest.approx(math.sqrt(MARGIN * honest * low), rel=1e-3)
    # no variant of a kind on some call, or one not finite: no per-call verdict
    assert pr.small_calls([o[0]], o[:1], [{"native": o[0]}], "float32", MARGIN, FIXED) is None
    assert pr.small_calls([o[0]], o[:1], [{"native": o[0] * math.inf, "low": o[0]}], "float32", MARGIN, FIXED) is None


def test_one_value_is_not_forgiven_its_own_scale():
    """A scalar 1.5e-3 off on one call (within the scale allowance) is an error of 1.5e-3, not
    0; the same uniform offset on five calls is one common scale, forgiven as on a large output."""
    o = [torch.tensor([v], dtype=torch.float64) for v in (1.3, -0.7, 2.1, 0.4, -1.6)]
    exact = [{"native": x, "tf32_nearest": x, "low": x * (1 + 1e-4)} for x in o]
    off = [x * (1 + 1.5e-3) for x in o]
    one = pr.small_calls(off[:1], o[:1], exact[:1], "float32", MARGIN, FIXED)
    assert one[0].error == pytest.approx(1.5e-3, rel=1e-6)
    assert all(c.error < 1e-9 for c in pr.small_calls(off, o, exact, "float32", MARGIN, FIXED))


def test_a_call_where_low_stays_within_honest_takes_the_fixed_limit():
    """Inputs on which the low variant is no worse than honest arithmetic cannot tell them
    apart: the fixed limit (scaled to the dtype), and never below the honest allowance."""
    o = [torch.tensor([1.0, -1.0, 0.5], dtype=torch.float64)]
    same = [{"native": o[0] * (1 + 1e-5), "low": o[0] * (1 + 1e-5)}]
    c = pr.small_calls([o[0]], o, same, "bfloat16", MARGIN, FIXED)[0]
    assert not c.calibrated and c.limit == pr.fixed_limit("bfloat16", FIXED)
    big = [{"native": o[0] * (1 + 0.02), "low": o[0] * (1 + 0.02)}]  # honest itself above the fixed limit
    c = pr.small_calls([o[0]], o, big, "float32", MARGIN, FIXED)[0]
    assert not c.calibrated and c.limit == pytest.approx(MARGIN * c.honest) and c.limit > FIXED


def test_half_outputs_are_allowed_one_rounding_of_their_own():
    """A float16 value rounded the other way than the reference's (half an ulp either side of
    a midpoint) is honest: the allowance holds one rounding of the output, whatever the
    reference's own error on that call."""
    y = torch.tensor([1.0 + 2 ** -11], dtype=torch.float64)  # a float16 midpoint between 1 and 1 + 2^-10
    down, up = torch.tensor([1.0], dtype=torch.float16), torch.tensor([1.0 + 2 ** -10], dtype=torch.float16)
    variants = [{"native": down, "low": down}]
    c = pr.small_calls([up], [y], variants, "float16", MARGIN, FIXED)[0]
    assert c.error <= c.limit


# --------------------------------------------------------------------------- the verdict
def _entry(n: int, name: str = "float32", seed: int = 0, small: bool = True):
    """A reference entry for ``_series`` as the reference process makes it: five trials, their
    oracles, the calibration's errors on the first two, and the small record."""
    series = _series(n, name, seed)
    keys = [f"oracle{i}" for i in range(len(series))]
    outs = {v: [[pr.judged(s[1][v], None)] for s in series] for v in series[0][1]}
    oracle = [[pr.judged(s[0], None)] for s in series]
    calib = {"trials": 2, "n": [n], "oracles": keys,
             "errors": {v: pr.leaf_errors(got[:2], oracle[:2]) for v, got in outs.items()}}
    if small:
        calib["small"] = pr.small_record(keys, outs)
    entry = {"refs": [[s[1]["native"]] for s in series], "oracle": [[s[0]] for s in series],
             "precision": pr.calibration_record(calib)}
    return entry, series


def _cand(series, which: str) -> dict:
    cand = {f"cand{i}": [s[2][which]] for i, s in enumerate(series)}
    cand.update(recheck1=[series[1][2][which]], determinism0=[series[0][2][which]])
    return cand


@pytest.mark.parametrize("name", list(DTYPES))
@pytest.mark.parametrize("n", [1, 3, 57, 63, 64, 65])
def test_the_verdict_judges_fewer_than_64_values_per_call(n, name):
    """Below 64 values each call against its own inputs' variants, from 64 on the one limit
    of the problem: honest passes and low operands fail either way, in every dtype."""
    entry, series = _entry(n, name)
    ok = pr.verdict(entry, _cand(series, "honest"), MARGIN, RATIO, FIXED)
    bad = pr.verdict(entry, _cand(series, "low"), MARGIN, RATIO, FIXED)
    per_call = n < pr.MIN_ELEMENTS
    for v in (ok, bad):
        assert [(x.measure, x.dtype) for x in v.leaves] == [("oracle", name)] and not v.warnings, v
        assert ("each call's own inputs" in v.leaves[0].note) == per_call
    assert guards.precision_flag(ok.leaves) == []
    hits = guards.precision_flag(bad.leaves)
    assert hits and hits[0][0] == "precision_downgrade" and "float64 oracle" in hits[0][1], hits


def test_a_low_call_among_honest_ones_is_caught_and_named():
    entry, series = _entry(1, seed=2)
    cand = _cand(series, "honest")
    cand["cand3"] = [series[3][2]["low"]]
    v = pr.verdict(entry, cand, MARGIN, RATIO, FIXED)
    hits = guards.precision_flag(v.leaves)
    assert hits and "call cand3" in hits[0][1], hits


def test_without_the_small_record_the_fixed_limit_applies_with_a_warning():
    entry, series = _entry(1, small=False)
    v = pr.verdict(entry, _cand(series, "low"), MARGIN, RATIO, FIXED)
    assert [x.measure for x in v.leaves] == ["reference"] and v.leaves[0].limit == FIXED
    assert v.warnings and "too few for one limit" in v.warnings[0]


def test_small_record_keeps_small_leaves_only():
    big, small = torch.randn(70, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
    outs = {"native": [[pr.judged(big, None), pr.judged(small.float(), None), None]]}
    rec = pr.small_record(["oracle0"], outs)
    assert rec["oracle0"]["native"][0] is None and rec["oracle0"]["native"][2] is None
    assert rec["oracle0"]["native"][1] == pytest.approx(small.float().double().reshape(-1).tolist())
    kept = pr.calibration_record({"trials": 1, "n": [70, 6], "errors": {}, "oracles": ["oracle0"], "small": rec})
    assert kept["small"] == rec
    assert "small" not in pr.calibration_record({"trials": 1, "n": [], "errors": {}, "small": ["junk"]})
    assert pr.compared_count(big, None) == 70 and pr.compared_count(torch.arange(3), None) == 0
    assert pr.compared_count(torch.randn(3, dtype=torch.complex64), None) == 6


# --------------------------------------------------------------------------- honest kernels, CPU evaluator
TASK = '''"""{doc}

op_type: reduction
"""
import torch
import torch.nn as nn

{sizes}
CPU_SHAPES = {cpu}
PERTURB = {perturb}


class Model(nn.Module):
    def forward(self, x):
        return {expr}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''


def _task(name: str, doc: str, sizes: str, cpu: dict, expr: str, inputs: str, perturb: str) -> Task:
    """A reduction task whose shape re-check perturbs the reduced size ``perturb`` only (its outputs stay as few)."""
    return Task(name=f"level1/{name}", level=1, problem_id=0,
                source=TASK.format(doc=doc, sizes=sizes, cpu=cpu, expr=expr, inputs=inputs, perturb=[perturb]))


def _mean_task(dtype: str) -> Task:
    return _task(f"mean_rows_{dtype}", "Mean over the middle dimension: (batch, dim2) from (batch, dim1, dim2).",
                 "batch_size = 64\ndim1 = 512\ndim2 = 256", {"batch_size": 3, "dim1": 300, "dim2": 19},
                 "torch.mean(x, dim=1)", f"torch.randn(batch_size, dim1, dim2).to(torch.{dtype})", "dim1")


MEAN = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_kernel(x_ptr, y_ptr, D1, D2, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    b = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    rows = tl.arange(0, BLOCK_R)
    acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)
    for r0 in range(0, D1, BLOCK_R):
        r = r0 + rows
        m = (r[:, None] < D1) & (cols[None, :] < D2)
        acc += tl.load(x_ptr + b * D1 * D2 + r[:, None] * D2 + cols[None, :], mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + b * D2 + cols, (tl.sum(acc, axis=0) / D1).to(y_ptr.dtype.element_ty), mask=cols < D2)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        B, D1, D2 = x.shape
        y = torch.empty((B, D2), dtype=x.dtype, device=x.device)
        mean_kernel[(B, triton.cdiv(D2, 32))](x, y, D1, D2, BLOCK_R=16, BLOCK_C=32)
        return y
'''

SUM_TASK = _task("sum_all", "Sum of every element of a (n,) float32 vector of positive values: one scalar.",
                 "n = 1 << 24", {"n": 100003}, "x.sum()", "torch.rand(n)", "n")

SUM_ATOMIC = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0), axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.zeros((), dtype=x.dtype, device=x.device)
        sum_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
        return out
'''

SUM_LANES = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):  # each lane a plain running sum of n / BLOCK values
        acc += tl.load(x_ptr + start + offs, mask=start + offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty((), dtype=x.dtype, device=x.device)
        sum_kernel[(1,)](x, out, x.numel(), BLOCK=256)
        return out
'''


def _small_judged(res, dtype: str = "float32") -> None:
    assert res.correct, (res.error_kind, res.error_msg, res.flags, res.precision)
    leaves = (res.precision or {}).get("leaves") or []
    assert leaves and all(x["measure"] == "oracle" and x["dtype"] == dtype for x in leaves), res.precision
    assert all("each call's own inputs" in x.get("note", "") for x in leaves), res.precision


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_honest_small_mean_passes(cpu_evaluator, dtype):
    """A tree reduction (float32 lanes, tl.sum) to 3 x 19 = 57 values, rounded once to the
    output's dtype."""
    _small_judged(cpu_evaluator.evaluate(_mean_task(dtype), MEAN), dtype)


@pytest.mark.parametrize("source", [SUM_ATOMIC, SUM_LANES], ids=["atomics", "lanes"])
def test_honest_kahan_free_scalar_sums_pass(cpu_evaluator, source):
    """A scalar sum of 100003 positive values without compensation: ~400 block sums added by
    atomics in launch order, or 256 lanes of ~390 running additions each (interpreted: fewer trips)."""
    _small_judged(cpu_evaluator.evaluate(SUM_TASK, source))


def test_honest_scalar_losses_pass(cpu_evaluator):
    """The built-in cross-entropy solution (a per-lane online log-sum-exp, a one-program mean)
    on the built-in task and on the fixture task."""
    task = next(t for t in load_suite("builtin") if t.name == "level1/6_CrossEntropy")
    source = candidate_path(REFERENCE_DIR, task).read_text()
    for t in (task, fixture_task("cross_entropy_small")):
        _small_judged(cpu_evaluator.evaluate(t, source))


def test_an_uncalibrated_leaf_allows_the_honest_variants_own_error():
    """Where bf16 operands cannot be told from honest arithmetic, the fixed limit holds, but
    never below margin x the honest variants' error (an honest kernel summing in another
    order errs about that much)."""
    from davinci_kernel.evaluate.shared import precision as pr

    fixed = pr.fixed_limit("float32", 4e-3)
    honest = {name: 3e-3 for name in pr.HONEST}
    assert pr.uncalibrated_limit({**honest, pr.LOW: 5e-3}, "float32", 4e-3, 2.0) == pytest.approx(6e-3)
    assert pr.uncalibrated_limit({pr.LOW: 5e-3}, "float32", 4e-3, 2.0) == fixed  # no honest figure
    tiny = {name: 1e-8 for name in pr.HONEST}
    assert pr.uncalibrated_limit({**tiny, pr.LOW: 5e-3}, "float32", 4e-3, 2.0) == fixed
