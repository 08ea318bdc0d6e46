"""Precision by calibration (evaluate/precision.py): the rounding, error and limit functions
over odd shapes and dtypes, the harness's verdict on synthetic reference entries, honest
float32 and TF32 kernels passing the real evaluator where bf16 operands are caught, and the
same per output dtype: honest float16/bfloat16 kernels (float32 accumulation) pass where
bf16-operand (float16) and fp8-operand (bfloat16) ones are caught, at odd shapes (the
cheating fixtures themselves run in test_evaluate_cheats.py)."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import FIXTURES, fixture_task

from davinci_kernel.evaluate.harness import guards
from davinci_kernel.evaluate.harness.correctness import REL_L2_LIMITS
from davinci_kernel.evaluate.shared import precision
from davinci_kernel.evaluate.shared.precision import (
    LeafVerdict,
    RoundedContractions,
    leaf_errors,
    leaf_limit,
    rel_l2,
    round_mantissa,
    round_tree,
    scaled_error,
    verdict,
)
from davinci_kernel.tasks import REFERENCE_DIR, candidate_path, load_suite


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _low_bits(t: torch.Tensor, drop: int) -> torch.Tensor:
    return t.contiguous().view(torch.int32) & ((1 << drop) - 1)


# --------------------------------------------------------------------------- rounding
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 5), (1,), (7, 13), (2, 3, 5, 7)])
def test_round_to_bf16_nearest_is_the_bf16_cast(shape):
    x = torch.randn(shape, generator=_gen()) * 1e3
    assert torch.equal(round_mantissa(x, 7), x.to(torch.bfloat16).to(torch.float32))
    assert round_mantissa(x, 7).shape == x.shape


def test_round_handles_special_values_and_ties():
    big = torch.finfo(torch.float32).max
    tiny = torch.finfo(torch.float32).tiny / 8  # a subnormal
    x = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), big, -big, tiny, -tiny,
                      1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8])  # the last two: ties, to even
    got = round_mantissa(x, 7)
    want = x.to(torch.bfloat16).to(torch.float32)
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[~got.isnan()], want[~want.isnan()])
    assert math.isinf(float(got[5])) and float(got[6]) == -math.inf  # past the largest finite bf16
    assert float(got[9]) == 1.0 and float(got[10]) == 1.0 + 2 ** -6


def test_round_toward_zero_truncates_and_tf32_keeps_ten_bits():
    x = torch.randn(64, 33, generator=_gen()).t()  # not contiguous
    z = round_mantissa(x, 10, "zero")
    assert (_low_bits(z, 13) == 0).all() and (z.abs() <= x.abs()).all()
    n = round_mantissa(x, 10)
    assert (_low_bits(n, 13) == 0).all() and ((n - x).abs() <= (z - x).abs()).all()
    assert (n - x).abs().max() <= x.abs().max() * 2 ** -11


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.float8_e4m3fn])
def test_round_leaves_other_dtypes_alone(dtype):
    x = torch.ones(4, 5, dtype=dtype)
    assert round_mantissa(x, 7) is x
    assert round_mantissa(torch.ones(3), 23) is not None


@pytest.mark.parametrize("dtype,bits", [(torch.float64, 52), (torch.float32, 23), (torch.float16, 10),
                                        (torch.bfloat16, 7)])
def test_round_keeps_a_dtype_at_or_above_its_own_bits(dtype, bits):
    x = torch.randn(7, 3, generator=_gen()).to(dtype)
    assert round_mantissa(x, bits) is x and round_mantissa(x, None) is x


@pytest.mark.parametrize("shape", [(), (1,), (7, 13), (3, 0, 5), (2, 3, 5, 7)])
@pytest.mark.parametrize("dtype,bits,narrow", [(torch.float16, 7, torch.bfloat16), (torch.float64, 23, torch.float32),
                                               (torch.float64, 7, torch.bfloat16), (torch.bfloat16, 3, None),
                                               (torch.float16, 3, None)])
def test_round_every_floating_dtype_in_its_own_dtype(shape, dtype, bits, narrow):
    """float16 and float64 rounded to a narrower type's mantissa are that type's cast (within
    its range), in their own dtype; bfloat16/float16 to fp8 e4m3's 3 bits keep 3 bits."""
    x = torch.randn(shape, generator=_gen(3)).to(dtype)
    got = round_mantissa(x, bits)
    assert got.dtype == dtype and got.shape == x.shape
    if narrow is not None:
        assert torch.equal(got, x.to(narrow).to(dtype))
    else:
        low = (got.float().contiguous().view(torch.int32) & ((1 << 20) - 1))
        assert (low == 0).all() and ((got.float() - x.float()).abs() <= x.float().abs() * 2 ** -4).all()
    z = round_mantissa(x, bits, "zero")
    assert (z.abs() <= x.abs()).all()


def test_round_complex_by_its_components():
    z = torch.randn(6, 5, dtype=torch.complex64, generator=_gen())
    got = round_mantissa(z, 7)
    assert got.dtype == torch.complex64
    assert torch.equal(torch.view_as_real(got), torch.view_as_real(z).bfloat16().float())
    assert round_mantissa(z.to(torch.complex128), 23).dtype == torch.complex128


def test_round_mode_must_be_known():
    with pytest.raises(ValueError):
        round_mantissa(torch.ones(2), 7, "up")


def test_round_tree_rounds_nested_float32_only():
    x, i = torch.randn(5, generator=_gen()), torch.arange(5)
    got = round_tree([x, (x, [i, 3]), "s", x.double(), x.half()], {"float32": 7}, "nearest")
    assert torch.equal(got[0], x.bfloat16().float()) and isinstance(got[1], tuple)
    assert torch.equal(got[1][0], got[0]) and got[1][1][0] is i and got[1][1][1] == 3
    assert got[2] == "s" and torch.equal(got[3], x.double())  # a dtype the rounding does not name
    assert got[4] is not None and torch.equal(got[4], x.half())
    low = round_tree([x.half(), x.double()], precision.VARIANTS[-1].rounding, "nearest")  # the low variant
    assert torch.equal(low[0], x.half().bfloat16().half()) and torch.equal(low[1], x.double().float().double())


def test_rounded_contractions_round_matmul_and_conv_operands_only():
    a, b = torch.randn(6, 9, generator=_gen(1)), torch.randn(9, 4, generator=_gen(2))
    w, img = torch.randn(3, 2, 3, 3, generator=_gen(3)), torch.randn(1, 2, 8, 8, generator=_gen(4))
    r = precision.round_mantissa
    with torch.no_grad(), RoundedContractions({"float32": 7}, "nearest"):
        mm, lin = a @ b, torch.nn.functional.linear(a, b.t())
        conv = torch.nn.functional.conv2d(img, w)
        ew = a * 1.0001
    assert torch.allclose(mm, r(a, 7) @ r(b, 7), rtol=1e-6, atol=1e-6)
    assert torch.allclose(lin, r(a, 7) @ r(b, 7), rtol=1e-6, atol=1e-6)
    assert torch.allclose(conv, torch.nn.functional.conv2d(r(img, 7), r(w, 7)), rtol=1e-6, atol=1e-6)
    assert not torch.allclose(mm, a @ b, rtol=1e-5, atol=1e-5)
    assert torch.equal(ew, a * 1.0001)  # elementwise ops see the values as they are
    h, g = a.half(), b.half()
    with torch.no_grad(), RoundedContractions({"float16": 7}, "nearest"):
        hm = h @ g
    assert torch.equal(hm, r(h, 7) @ r(g, 7)) and not torch.equal(hm, h @ g)


# --------------------------------------------------------------------------- errors
def test_scaled_error_edges():
    o = torch.randn(10, 10, generator=_gen(), dtype=torch.float64)
    assert scaled_error(torch.zeros(3), torch.zeros(3)) == 0.0
    assert scaled_error(torch.ones(3), torch.zeros(3)) == math.inf
    assert scaled_error(torch.tensor([1.0, float("nan")]), torch.ones(2)) == math.inf
    assert scaled_error(o.float(), o) < 1e-7
    assert scaled_error((o * (1 - 1e-3)).reshape(-1), o) < 1e-12  # a uniform shrink within the allowance
    assert scaled_error(o * 0.99, o) == pytest.approx((1 - precision.SCALE_ALLOWANCE) - 0.99, rel=1e-9)
    assert scaled_error(torch.zeros(10, 10), o) == pytest.approx(1 - precision.SCALE_ALLOWANCE)  # zeros stay wrong
    assert rel_l2(o * 1.001, o) == pytest.approx(1e-3, rel=1e-9)
    assert scaled_error(o.half(), o) < 1e-3  # any floating dtype
    with pytest.raises(ValueError):
        scaled_error(torch.ones(3), torch.ones(4))


def test_scaled_error_forgives_truncation_bias_not_bf16_noise():
    """Truncated TF32 operands (Triton's tl.dot) shrink a sum of positive products by ~7e-4;
    measured this way they are as close as TF32 to nearest, and bf16 stays ~8x further."""
    a, b = torch.rand(256, 32, generator=_gen(1)), torch.rand(32, 256, generator=_gen(2))
    exact = a.double() @ b.double()
    r = round_mantissa
    zero = r(a, 10, "zero").double() @ r(b, 10, "zero").double()
    near = r(a, 10).double() @ r(b, 10).double()
    bf16 = r(a, 7).double() @ r(b, 7).double()
    assert rel_l2(zero, exact) > rel_l2(bf16, exact)  # plain rel-L2: truncated TF32 looks worse than bf16
    assert scaled_error(zero, exact) < 2 * scaled_error(near, exact)
    assert scaled_error(bf16, exact) > 5 * scaled_error(zero, exact)


def test_leaf_errors_per_leaf_worst_over_trials():
    o1, o2 = torch.randn(8, 8, dtype=torch.float64), torch.randn(100, dtype=torch.float64)

    def judged(leaves):
        return [precision.judged(x, None) for x in leaves]

    oracle = [judged([o1, o2, torch.arange(3)]), judged([o1 * 2, o2, torch.arange(3)])]
    outs = [judged([o1.float(), (o2 * 1.01).float(), torch.arange(3)]), judged([(o1 * 2).float(), o2.float(),
                                                                               torch.arange(3)])]
    errs = leaf_errors(outs, oracle)
    assert errs[0] < 1e-7 and errs[1] == pytest.approx(1.01 - (1 + precision.SCALE_ALLOWANCE), rel=1e-4)
    assert errs[2] is None  # not a floating leaf
    assert leaf_errors([judged([o1.float()[:4]])], [judged([o1])]) == [None]  # another shape
    assert leaf_errors([judged([o1.half()])], [judged([o1])])[0] < 1e-3  # any floating dtype, half included
    assert leaf_errors([judged([o1.float()])], [judged([o1.float()])]) == [None]  # an oracle that is not float64
    assert leaf_errors([judged([o1.float(), o2.float()])], [judged([o1])]) == [None]  # another structure
    z = torch.randn(5, 3, dtype=torch.complex128)
    assert leaf_errors([judged([z.to(torch.complex64)])], [judged([z])])[0] < 1e-6  # complex by its components


def test_compared_values_sample_large_leaves_at_the_secret_indices(monkeypatch):
    from davinci_kernel.evaluate.shared import transfer

    monkeypatch.setattr(transfer, "SAMPLE_MIN", 100)
    x = torch.randn(40, 50)
    got = precision.compared_values(x, 7)
    idx = transfer.sample_indices(torch, x.numel(), 7)
    assert torch.equal(got, x.reshape(-1)[idx])
    assert precision.compared_values(torch.randn(9), 7).shape == (9,)
    assert precision.compared_values(torch.arange(4), 7) is None
    j = precision.judged(x, 7)
    assert j.shape == (40, 50) and j.dtype == torch.float32 and torch.equal(j.values, got)
    assert j.values.data_ptr() != x.data_ptr() and precision.judged("s", 7) is None


# --------------------------------------------------------------------------- the limit rule
def _errs(f32=1e-7, near=3e-4, zero=3.2e-4, dev=None, bf16=2.4e-3):
    return {"native": f32, "tf32_nearest": near, "tf32_zero": zero, "tf32_device": dev, "low": bf16}


def test_limit_is_the_geometric_mean_of_margin_times_honest_and_bf16():
    limit, why = leaf_limit(_errs(), 1000, 2.0, 4.0)
    assert why == "calibrated" and limit == pytest.approx(math.sqrt(2 * 3.2e-4 * 2.4e-3))
    assert 3.2e-4 * 2 < limit < 2.4e-3
    limit_dev, _ = leaf_limit(_errs(dev=4e-4), 1000, 2.0, 4.0)  # the GPU's TF32 run counts as honest
    assert limit_dev == pytest.approx(math.sqrt(2 * 4e-4 * 2.4e-3))


@pytest.mark.parametrize("errs,n,words", [
    (_errs(bf16=1e-3), 1000, "not 4x"),  # bf16 too close to TF32
    (_errs(), 10, "too few"),
    (_errs(bf16=None), 1000, "no finite"),
    (_errs(near=math.inf), 1000, "no finite"),
    ({"low": 1e-3}, 1000, "no finite"),
])
def test_limit_falls_back_where_bf16_cannot_be_told_apart(errs, n, words):
    limit, why = leaf_limit(errs, n, 2.0, 4.0)
    assert limit is None and words in why


def test_limit_has_an_honest_floor():
    limit, _ = leaf_limit(_errs(f32=0.0, near=0.0, zero=0.0, bf16=1e-3), 1000, 2.0, 4.0)
    assert limit == pytest.approx(math.sqrt(2 * precision.HONEST_FLOOR * 1e-3))


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_limit_floor_is_the_dtypes(dtype):
    """An exact reference (a relu, a copy) has honest error 0: the floor of its dtype applies,
    and sits at least ``ratio`` below what the dtype's low precision does to unit-normal inputs."""
    floor = precision.DTYPES[dtype].floor
    x = torch.randn(4096, generator=_gen(), dtype=torch.float64)
    wide = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    low = scaled_error(round_mantissa(x.to(wide[dtype]), precision.DTYPES[dtype].low_bits), x.to(wide[dtype]).double())
    limit, why = leaf_limit({"native": 0.0, "low": low}, 4096, 2.0, 4.0, dtype)
    assert why == "calibrated" and limit == pytest.approx(math.sqrt(2 * floor * low)) and limit < low / 2


def test_fixed_limit_scales_with_the_dtypes_low_precision():
    assert precision.fixed_limit("float32", 4e-3) == 4e-3 == precision.fixed_limit("float16", 4e-3)
    assert precision.fixed_limit("bfloat16", 4e-3) == pytest.approx(6.4e-2)
    assert precision.fixed_limit("float64", 4e-3) == pytest.approx(4e-3 * 2 ** -16)


# --------------------------------------------------------------------------- the verdict (synthetic entries)
def _entry(shape=(40, 30), calibrated=True, sampled=False):
    oracle = torch.randn(shape, generator=_gen(5), dtype=torch.float64)
    ref = oracle.float()
    if sampled:
        ref = {"values": ref.reshape(-1), "seed": 9, "full_shape": [4096, 4096]}
        orc = {"values": oracle.reshape(-1), "seed": 9, "full_shape": [4096, 4096]}
    else:
        orc = oracle
    calib = {"trials": 1, "n": [oracle.numel(), 3], "errors": {k: [v, None] for k, v in _errs().items()}}
    return {"refs": [[ref, torch.arange(3)]], "oracle": [[orc, torch.arange(3)]] if calibrated else [],
            "precision": calib if calibrated else {"error": "RuntimeError: no float64 kernel"}}, oracle


def _cand(entry, values):
    r = entry["refs"][0][0]
    leaf = {**r, "values": values.reshape(-1)} if isinstance(r, dict) else values.reshape(r.shape)
    return {"cand0": [leaf, torch.arange(3)]}


@pytest.mark.parametrize("sampled", [False, True])
def test_verdict_passes_tf32_and_flags_bf16_against_the_oracle(sampled):
    entry, oracle = _entry(sampled=sampled)
    ok = verdict(entry, _cand(entry, round_mantissa(oracle.float(), 10, "zero")), 2.0, 4.0, 4e-3)
    assert [v.measure for v in ok.leaves] == ["oracle"] and not ok.warnings
    assert guards.precision_flag(ok.leaves) == []
    assert ok.record()["oracle_calls"] == 1 and ok.record()["leaves"][0]["limit"] == ok.leaves[0].limit
    bad = verdict(entry, _cand(entry, round_mantissa(oracle.float(), 7)), 2.0, 4.0, 4e-3)
    hits = guards.precision_flag(bad.leaves)
    assert hits and hits[0][0] == "precision_downgrade" and "float64 oracle" in hits[0][1]
    assert bad.leaves[0].error < 4e-3  # the fixed limit would have let it through


@pytest.mark.parametrize("shape", [(37, 53), (5, 301)])
@pytest.mark.parametrize("dtype,honest,low", [(torch.float16, 2.1e-4, 2.4e-3), (torch.bfloat16, 1.7e-3, 3.8e-2),
                                              (torch.float64, 0.0, 3e-8)])
def test_verdict_holds_every_floating_dtype_to_its_own_limit(shape, dtype, honest, low):
    """A float16, bfloat16 or float64 output against its oracle: the dtype's own rounding passes,
    operands one step narrower (bf16, fp8, float32) fail, though the fixed rule let them through."""
    oracle = torch.randn(shape, generator=_gen(5), dtype=torch.float64)
    name = precision.dtype_name(dtype)
    calib = {"trials": 1, "n": [oracle.numel()], "errors": {"native": [honest], "tf32_nearest": [honest],
                                                            "low": [low]}}
    entry = {"refs": [[oracle.to(dtype)]], "oracle": [[oracle]], "precision": calib}
    ok = verdict(entry, {"cand0": [oracle.to(dtype)]}, 2.0, 4.0, 4e-3)
    assert [(x.measure, x.dtype) for x in ok.leaves] == [("oracle", name)] and guards.precision_flag(ok.leaves) == []
    narrow = round_mantissa(oracle.to(dtype), precision.DTYPES[name].low_bits, "zero")
    bad = verdict(entry, {"cand0": [narrow]}, 2.0, 4.0, 4e-3)
    hits = guards.precision_flag(bad.leaves)
    assert hits and f"{name} error" in hits[0][1] and precision.low_name(name) in hits[0][1], hits
    assert rel_l2(narrow, oracle.to(dtype)) < {"float64": 1e-6}.get(name, REL_L2_LIMITS[name].rel_l2)  # old rules


@pytest.mark.parametrize("low", ["cand1", "recheck1", "determinism0", "timed0", "check1", "pcand"])
def test_every_compared_call_is_held_to_the_limit(low):
    """A candidate at low precision on any one compared call (not only the first trials) fails,
    and the verdict names that call; the perturbed size is held to its own calibration."""
    entry, oracle = _entry()
    orc = entry["oracle"][0]
    entry.update(refs=entry["refs"] * 2, oracle=entry["oracle"] * 2, vrefs=entry["refs"][:1] * 2,
                 voracle=[orc] * 2, pref=entry["refs"][0], poracle=orc, pprecision=entry["precision"])
    good, bad = round_mantissa(oracle.float(), 10, "zero"), round_mantissa(oracle.float(), 7)
    keys = ["cand0", "cand1", "recheck1", "determinism0", "timed0", "check0", "check1", "pcand"]
    cand = {k: _cand(entry, bad if k == low else good)["cand0"] for k in keys}
    v = verdict(entry, cand, 2.0, 4.0, 4e-3)
    assert v.oracle_calls == len(keys) and {x.measure for x in v.leaves} == {"oracle"}
    hits = guards.precision_flag(v.leaves)
    assert hits and f"call {low}" in hits[0][1], hits
    assert [x.size for x in v.leaves] == ["task", "perturbed"]
    assert guards.precision_flag(verdict(entry, {k: cand[k] for k in keys if k != low}, 2.0, 4.0, 4e-3).leaves) == []


def test_verdict_falls_back_to_the_fixed_limit_with_a_warning():
    entry, oracle = _entry(calibrated=False)
    v = verdict(entry, _cand(entry, round_mantissa(oracle.float(), 7)), 2.0, 4.0, 4e-3)
    assert [x.measure for x in v.leaves] == ["reference"] and v.leaves[0].limit == 4e-3
    assert v.warnings and v.warnings[0].startswith("precision_uncalibrated:") and "no float64 kernel" in v.warnings[0]
    assert guards.precision_flag(v.leaves) == []
    far = verdict(entry, _cand(entry, oracle.float() * 1.01), 2.0, 4.0, 4e-3)
    assert "relative L2 error" in guards.precision_flag(far.leaves)[0][1]


def test_verdict_skips_other_dtypes_and_takes_uncalibrated_ones_by_their_fixed_rule():
    f8 = torch.randn(50, generator=_gen()).to(torch.float8_e4m3fn)
    assert verdict({"refs": [[f8, torch.arange(3)]]}, {"cand0": [f8, torch.arange(3)]}, 2.0, 4.0, 4e-3).record() is None
    z = torch.randn(50, dtype=torch.complex64, generator=_gen())
    v = verdict({"refs": [[z]]}, {"cand0": [z * 1.01]}, 2.0, 4.0, 4e-3)
    assert v.leaves[0].measure == "reference" and v.leaves[0].error == pytest.approx(0.01, rel=1e-3)
    assert v.leaves[0].dtype == "float32" and v.leaves[0].limit == 4e-3
    half = torch.randn(50, generator=_gen()).half()
    h = verdict({"refs": [[half]]}, {"cand0": [(half.float() * 1.005).half()]}, 2.0, 4.0, 4e-3)
    assert h.leaves[0].dtype == "float16" and guards.precision_flag(h.leaves)  # 5e-3 > 4e-3: no longer unjudged
    w = torch.randn(50, generator=_gen(), dtype=torch.float64)
    d = verdict({"refs": [[w]]}, {"cand0": [w.float().double()]}, 2.0, 4.0, 4e-3)
    assert d.leaves[0].limit == pytest.approx(4e-3 * 2 ** -16) and not guards.precision_flag(d.leaves)


def test_low_mantissa_sign_needs_a_reference_that_is_not_16_bit_itself():
    assert guards.precision_flag([], 1.0, 0.0)[0][0] == "precision_downgrade"
    assert guards.precision_flag([], 1.0, 1.0) == []  # the problem's own outputs are 16-bit values
    leaf = LeafVerdict(0, 1e-3, 2e-3, "oracle", honest=3e-4, low=3e-3)
    assert guards.precision_flag([leaf], 0.5, 0.0) == []


@pytest.mark.parametrize("dtype,narrow", [(torch.float32, torch.float16), (torch.float16, torch.bfloat16),
                                          (torch.bfloat16, torch.float8_e4m3fn), (torch.float64, torch.float32)])
def test_low_mantissa_share_of_every_floating_dtype(dtype, narrow):
    """Outputs passed through a narrower type (float16 through bf16, bfloat16 through fp8,
    float64 through float32) have their low mantissa bits zero; the dtype's own do not."""
    from davinci_kernel.evaluate.harness.correctness import compare

    x = torch.randn(37, 53, generator=_gen(), dtype=torch.float64).to(dtype)
    through = x.to(narrow).to(dtype)
    c = compare([x], [through], 1e-1, 1e-1)
    assert c.low_mantissa_share > 0.98 and c.ref_low_mantissa_share < 0.5
    assert guards.precision_flag([], c.low_mantissa_share, c.ref_low_mantissa_share)[0][0] == "precision_downgrade"
    assert compare([x], [x], 1e-2, 1e-2).low_mantissa_share < 0.5


# --------------------------------------------------------------------------- honest kernels, CPU evaluator
MATMUL = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def tf32(x, MODE: tl.constexpr):  # MODE 0: float32 as it is; 1: TF32 by truncation (tl.dot on a GPU); 2: to nearest
    if MODE == 0:
        return x
    i = x.to(tl.int32, bitcast=True)
    if MODE == 2:
        i = i + 0xFFF + ((i >> 13) & 1)
    return (i & -8192).to(tl.float32, bitcast=True)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  MODE: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :], mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :], mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc += tl.dot(tf32(a, MODE), tf32(b, MODE){precision})
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=torch.float32)
        matmul_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](a, b, c, M, N, K, BM=64, BN=64, BK=32, MODE={mode})
        return c
'''

TRUNCATE = '''

@triton.jit
def _tf32_operand(x):  # TF32 as a GPU's tl.dot reads float32: the low 13 mantissa bits dropped
    return (x.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)
'''


def _oracle_judged(res) -> None:
    assert res.correct, (res.error_kind, res.error_msg, res.flags)
    leaves = (res.precision or {}).get("leaves") or []
    assert leaves and {x["measure"] for x in leaves} == {"oracle"}, res.precision  # every compared call, every size
    assert [x["size"] for x in leaves if "size" in x][:1] == ["task"], res.precision
    assert not any(w.startswith("precision_uncalibrated") for w in res.warnings), res.warnings


@pytest.mark.parametrize("mode", [0, 1, 2], ids=["float32", "tf32_truncated", "tf32_nearest"])
def test_honest_float32_and_tf32_matmuls_pass(cpu_evaluator, mode):
    res = cpu_evaluator.evaluate(fixture_task("matmul_small_k"), MATMUL.format(mode=mode, precision=""))
    _oracle_judged(res)
    leaf = res.precision["leaves"][0]
    assert leaf["error"] < leaf["limit"] / 2 < leaf["low"]


def _builtin(name: str):
    return next(t for t in load_suite("builtin") if t.name == name)


@pytest.mark.parametrize("name", ["level2/1_Linear_Bias_GELU", "level3/1_PreNorm_MLP_Block"])
@pytest.mark.parametrize("tf32", [False, True], ids=["float32", "tf32_truncated"])
def test_honest_chained_kernels_pass(cpu_evaluator, name, tf32):
    """The built-in reference solutions, as they run in the interpreter (float32 tl.dot) and with
    every tl.dot operand truncated to TF32, as they run on a GPU."""
    task = _builtin(name)
    source = candidate_path(REFERENCE_DIR, task).read_text()
    if tf32:
        assert source.count("tl.dot(a, b, acc)") >= 1
        head, sep, rest = source.partition("\n@triton.jit")
        source = head + TRUNCATE + "\n" + sep + rest.replace("tl.dot(a, b, acc)",
                                                               "tl.dot(_tf32_operand(a), _tf32_operand(b), acc)")
    _oracle_judged(cpu_evaluator.evaluate(task, source))


def test_honest_half_softmax_is_judged_against_the_oracle(cpu_evaluator):
    res = cpu_evaluator.evaluate(fixture_task("softmax_half"), (FIXTURES / "legit" / "softmax_half_triton.py").read_text())
    _oracle_judged(res)
    assert {x["dtype"] for x in res.precision["leaves"]} == {"float16"}


HALF_MATMUL = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def keep(x, UP: tl.constexpr, DROP: tl.constexpr):  # UP: read in float32; DROP: the low DROP bits of that cut
    if DROP != 0:
        return (x.to(tl.float32).to(tl.int32, bitcast=True) & -(1 << DROP)).to(tl.float32, bitcast=True)
    if UP:
        return x.to(tl.float32)
    return x


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              UP: tl.constexpr, DROP: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :], mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :], mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N),
                    other=0.0)
        acc = tl.dot(keep(a, UP, DROP), keep(b, UP, DROP), acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        mm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, BM=32, BN=32, BK=32, UP={up},
                                                            DROP={drop})
        return c
'''


def _half_matmul_task(tmp_path, dtype: str, shape: tuple):
    """The float16 matmul fixture task in ``dtype`` ("half" | "bfloat16") at CPU sizes ``shape`` (M, K, N)."""
    from davinci_kernel.tasks import load_task_file

    src = (FIXTURES / "tasks" / "matmul_fp16.py").read_text()
    assert src.count(".half()") == 2 and 'CPU_SHAPES = {"M": 64, "K": 128, "N": 64}' in src
    m, k, n = shape
    src = src.replace(".half()", f".{dtype}()").replace('CPU_SHAPES = {"M": 64, "K": 128, "N": 64}',
                                                        f'CPU_SHAPES = {{"M": {m}, "K": {k}, "N": {n}}}')
    path = tmp_path / f"matmul_{dtype}_{m}_{k}_{n}.py"
    path.write_text(src)
    return load_task_file(path)


ODD = [(37, 129, 53), (70, 17, 33), (96, 160, 40)]


# The CPU interpreter's tl.dot reads bfloat16 operands as raw integers: bf16 kernels upcast
# first (exact: a bf16 value is a float32 one, and a TF32 one on a GPU).
@pytest.mark.parametrize("shape", ODD, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype,up", [("half", 0), ("half", 1), ("bfloat16", 1)], ids=["fp16", "fp16_up", "bf16"])
def test_honest_half_matmuls_pass_at_odd_shapes(cpu_evaluator, tmp_path, shape, dtype, up):
    """float32 accumulation of the half operands as they are, one rounding at the end (as a
    half tensor-core GEMM does): judged against the oracle, well inside the dtype's limit."""
    res = cpu_evaluator.evaluate(_half_matmul_task(tmp_path, dtype, shape), HALF_MATMUL.format(up=up, drop=0))
    _oracle_judged(res)
    for leaf in res.precision["leaves"]:
        assert leaf["dtype"] == ("float16" if dtype == "half" else "bfloat16")
        assert leaf["error"] < leaf["limit"] / 2 < leaf["low"], leaf


@pytest.mark.parametrize("shape", ODD, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype,drop", [("half", 16), ("half", 20), ("bfloat16", 20)],
                         ids=["fp16_bf16_operands", "fp16_fp8_operands", "bf16_fp8_operands"])
def test_narrower_operands_behind_half_outputs_are_caught(cpu_evaluator, tmp_path, shape, dtype, drop):
    """float16 outputs from operands truncated to bf16's 8-bit or fp8 e4m3's 4-bit mantissa,
    bfloat16 outputs from fp8 ones: ``precision_downgrade`` (or, for the coarsest, plainly wrong)."""
    res = cpu_evaluator.evaluate(_half_matmul_task(tmp_path, dtype, shape), HALF_MATMUL.format(up=1, drop=drop))
    assert res.correct is False
    assert "precision_downgrade" in res.flags or res.error_kind == "wrong_output", (res.flags, res.error_kind)
    if dtype == "half" and drop == 16:  # what the correctness rules alone let through
        assert "precision_downgrade" in res.flags and res.error_kind is None, (res.flags, res.error_msg)


@pytest.mark.parametrize("name", ["level1/5_RMSNorm_FP16"])
def test_builtin_half_reference_solutions_pass(cpu_evaluator, name):
    task = _builtin(name)
    res = cpu_evaluator.evaluate(task, candidate_path(REFERENCE_DIR, task).read_text())
    _oracle_judged(res)
    assert {x["dtype"] for x in res.precision["leaves"]} == {"float16"}


# --------------------------------------------------------------------------- the GPU
@pytest.mark.gpu
@pytest.mark.parametrize("precision_arg", ["", ', input_precision="tf32"'], ids=["default", "tf32"])
def test_real_tf32_tl_dot_passes_on_the_gpu(gpu_evaluator, precision_arg):
    res = gpu_evaluator.evaluate(fixture_task("matmul_small_k"), MATMUL.format(mode=0, precision=precision_arg))
    _oracle_judged(res)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["level1/1_Matmul", "level2/1_Linear_Bias_GELU", "level3/1_PreNorm_MLP_Block",
                                  "level3/2_MultiHeadSelfAttention"])
def test_builtin_tf32_solutions_pass_on_the_gpu(gpu_evaluator, name):
    task = _builtin(name)
    res = gpu_evaluator.evaluate(task, candidate_path(REFERENCE_DIR, task).read_text())
    assert res.correct, (res.error_kind, res.error_msg, res.flags)
    assert res.precision is not None
