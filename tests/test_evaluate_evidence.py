"""Kernel evidence: custom kernels by provenance (names the candidate's source defines,
matched against real kineto kernel names), the work formulas the profiler lacks (conv
family, embedding_bag, ``_foreach_*``), coverage as the lower of time and work coverage,
and the host-work and timed-kernel rules."""

from __future__ import annotations

import pytest
import torch

from davinci_kernel.evaluate.harness import guards
from davinci_kernel.evaluate.shared import profile
from davinci_kernel.evaluate.shared.audit import audited_call

# Names as kineto reports them on an H200 (torch 2.11, Triton 3.6)
REAL = {
    "copy_kernel": "copy_kernel",
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x128x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel"
    "__5x_cublas": "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x128x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_"
                   "execute_kernel__5x_cublas",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
    "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, "
    "std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
    "::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)":
        "at::native::vectorized_elementwise_kernel",
    "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float*, float const*, "
    "int, int, int, bool const*, int, bool)": "{anon}::softmax_warp_forward",
    "Memcpy DtoH (Device -> Pageable)": "",
    "Memset (Device)": "",
    "relu_kernel(float const*, float*, int)": "relu_kernel",
    "void scale_kernel<float>(float const*, float*, float, int)": "scale_kernel",
    "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(cutlass_80_tensorop_s1688gemm_128x128"
    "_32x3_nn_align4::Params)": "cutlass::Kernel2",
    "triton_poi_fused_relu_0": "triton_poi_fused_relu_0",
}


@pytest.mark.parametrize("name,ident", list(REAL.items()), ids=lambda x: x[:40] if isinstance(x, str) else x)
def test_kernel_identifier_of_real_names(name, ident):
    assert profile.kernel_identifier(name) == ident


@pytest.mark.parametrize("name,defined,custom", [
    ("copy_kernel", {"copy_kernel"}, True),
    ("copy_kernel_0d1d2de", {"copy_kernel"}, True),  # Triton 2.x signature suffix
    ("copy_kernel_two", {"copy_kernel"}, False),
    ("relu_kernel(float const*, float*, int)", {"relu_kernel"}, True),
    ("void scale_kernel<float>(float const*, float*, float, int)", {"scale_kernel"}, True),
    # a library kernel whose last component the candidate also defines is still the library's
    ("void at::native::vectorized_elementwise_kernel<4, F>(int, F)", {"vectorized_elementwise_kernel"}, False),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float*, float const*)",
     {"softmax_warp_forward"}, False),
    ("void cutlass::Kernel2<X>(X::Params)", {"Kernel2"}, False),
    ("Memcpy DtoH (Device -> Pageable)", {"DtoH", "Memcpy"}, False),
    ("triton_poi_fused_relu_0", {"relu_kernel"}, False),  # inductor's kernels are not the candidate's
    ("copy_kernel", set(), False),
])
def test_is_custom_by_provenance(name, defined, custom):
    assert profile.is_custom(name, defined) is custom


def test_classify_and_merge_roundtrip():
    t1 = {"top": [{"name": "k", "time_us": 6.0, "calls": 2, "stream": 7},
                  {"name": "void at::native::f<1>(int)", "time_us": 4.0, "calls": 1, "stream": 7}],
          "total_us": 12.0, "transfer_us": 1.0, "streams": 1, "distinct": 3, "task": True}
    t2 = {"top": [{"name": "void at::native::f<1>(int)", "time_us": 9.0, "calls": 1, "stream": 7}],
          "total_us": 9.0, "streams": 1, "distinct": 1, "task": False}
    back = profile.split_tables(profile.merge_tables([t1, t2], top=8))
    assert [b["task"] for b in back] == [True, False]
    c1, c2 = (profile.classify(b, ["k"]) for b in back)
    assert c1["custom_launches"] == 2 and c1["time_coverage"] == pytest.approx(0.5)  # 6 of 12 (a row beyond the top)
    assert c2["custom_launches"] == 0 and c2["time_coverage"] == 0.0
    junk = profile.split_tables({"names": ["k", 3], "calls": [{"rows": [[5, 1, 1.0], "x", [0, 1, 2.0]]}, 7]})
    assert junk == [{"top": [{"name": "k", "calls": 1.0, "time_us": 2.0}], "calls": 1, "total_us": 0.0,
                     "task": True, "streams": 0}]


@pytest.mark.parametrize("t,w,want", [(0.69, 0.01, 0.01), (0.3, None, 0.3), (None, 0.8, 0.8), (None, None, None),
                                      (1.0, 1.0, 1.0)])
def test_coverage_is_the_lower(t, w, want):
    assert profile.combined(t, w) == want


def test_work_share_is_the_candidates_own_work():
    assert profile.work_share(1.0, 99.0, 100.0) == pytest.approx(0.01)
    assert profile.work_share(0.0, 5.0, 100.0) == 0.0  # a copy kernel beside torch's shortcut
    # custom capped at the reference's work (1000 / 1010), torch left 99 % of it undone
    assert profile.work_share(5000.0, 10.0, 1000.0) == pytest.approx(0.99)
    assert profile.work_share(500.0, 100.0, 100.0) == 0.0  # torch did the whole problem: decoy work earns nothing
    assert profile.work_share(60.0, 40.0, 100.0) == pytest.approx(0.6)  # honest halves: both bounds agree
    assert profile.work_share(60.0, 85.0, 100.0) == pytest.approx(0.15)  # at most what torch left undone
    assert profile.work_share(9.0, 1.0, None) == pytest.approx(0.9)  # no reference figure: the first bound alone
    assert profile.work_share(0.0, 0.0, 100.0) == 0.0 and profile.work_share(0.0, 0.0, 0.0) is None
    assert profile.work_share(None, 1.0, 10.0) is None and profile.work_share(10.0, None, 10.0) is None
    # the share torch left undone in one pass per element op as well: softmax written out (3
    # passes, 3 counted ops) against the fused op (1 pass, 5 counted ops) left nothing undone
    assert profile.work_share(100.0, 3.0, 5.0) == pytest.approx(0.4)
    assert profile.work_share(100.0, 3.0, 5.0, 3.0, 1.0) == 0.0
    assert profile.work_share(10.0, 9.0, 10.0, 1.0, 2.0) == pytest.approx(0.1)  # torch's fused op, a custom ReLU


def _work(fn, *args) -> float:
    return audited_call(torch, fn, list(args), all_threads=True)[1]["work"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n,c_in,c_out,k,stride,pad,dil,groups", [
    (2, 6, 8, 5, 2, 1, 1, 2), (1, 3, 4, 1, 1, 0, 1, 1), (3, 4, 4, 3, 1, 2, 2, 4), (1, 5, 7, 4, 3, 0, 1, 1)])
def test_conv_flops(dtype, n, c_in, c_out, k, stride, pad, dil, groups):
    F = torch.nn.functional
    for dims in (1, 2, 3):
        x = torch.randn(n, c_in, *([9] * dims), dtype=dtype)
        w = torch.randn(c_out, c_in // groups, *([k] * dims), dtype=dtype)
        conv = getattr(F, f"conv{dims}d")
        y = conv(x, w, None, stride, pad, dil, groups)
        want = 2 * y.numel() * (c_in // groups) * k ** dims
        assert _work(lambda a, b, f=conv: f(a, b, None, stride, pad, dil, groups), x, w) == pytest.approx(want)
        wt = torch.randn(c_in, c_out // groups, *([k] * dims), dtype=dtype)
        convt = getattr(F, f"conv_transpose{dims}d")
        want_t = 2 * x.numel() * (c_out // groups) * k ** dims
        assert _work(lambda a, b, f=convt: f(a, b, None, stride, 0, 0, groups, dil), x, wt) == pytest.approx(want_t)


def test_conv_padding_same_and_unbatched():
    x, w = torch.randn(4, 17), torch.randn(6, 4, 3)
    y = torch.nn.functional.conv1d(x, w, padding="same")
    assert _work(lambda a, b: torch.nn.functional.conv1d(a, b, padding="same"), x, w) == 2 * y.numel() * 4 * 3


def test_matmul_as_conv1d_and_embedding_bag_weigh_like_matmul():
    m, k, n = 33, 47, 29
    x, w = torch.randn(m, k), torch.randn(k, n)
    mm = _work(torch.matmul, x, w)
    conv = _work(lambda a, b: torch.nn.functional.conv1d(a.unsqueeze(-1), b.t().unsqueeze(-1)), x, w)
    idx, off = torch.arange(k).repeat(m), torch.arange(0, m * k, k)
    bag = _work(lambda a, b: torch.nn.functional.embedding_bag(idx, b, off, mode="sum",
                                                               per_sample_weights=a.reshape(-1)), x, w)
    assert conv == pytest.approx(mm, rel=0.01) and bag == pytest.approx(mm, rel=0.01)
    idx2 = torch.randint(0, 5, (3, 10))  # 30 lookups of 16: more than the table's 80 elements
    assert _work(lambda i, t: torch.nn.functional.embedding(i, t), idx2, torch.randn(5, 16)) == 30 * 16


def test_foreach_counts_its_tensors():
    xs = [torch.randn(30, 40), torch.randn(7), torch.randn(3, 3, 3)]
    total = sum(t.numel() for t in xs)
    assert _work(lambda: torch._foreach_add(xs, xs)) >= total
    assert _work(lambda: torch._foreach_clamp_min(xs, 0.0)) >= total


def test_item_reads_are_counted():
    t = torch.randn(37)
    _, a = audited_call(torch, lambda: [v.item() for v in t], [], all_threads=True)
    assert a["items"] == 37 and a["work"] == 0


@pytest.mark.parametrize("dtoh,in_bytes,items,elems,hit", [
    (0, 1000, 0, 250, False),
    (499, 1000, 0, 250, False),
    (500, 1000, 0, 250, True),  # half the input bytes read back
    (0, 1000, 124, 250, False),
    (0, 1000, 125, 250, True),  # half the input elements one by one
    (10, 0, 0, 0, False),  # no inputs known: no ratio
])
def test_host_work_threshold(dtoh, in_bytes, items, elems, hit):
    assert bool(guards.host_work_flag(dtoh, in_bytes, items, elems)) is hit


@pytest.mark.parametrize("checked,timed,checked_us,timed_us,hit", [
    (1, 1.0, 10.0, 5.0, False),
    (1, 0.0, 10.0, 0.0, True),  # its kernel did not run while timed
    (2, 1.0, 10.0, 10.0, True),  # fewer launches per timed call
    (1, 1.0, 10.0, 1.0, True),  # the kernel ran, doing a tenth of the work
    (0, 0.0, 0.0, 0.0, False),  # nothing to compare with (kernel flags decide)
    (1, None, 10.0, None, False),
])
def test_timed_kernels_flag(checked, timed, checked_us, timed_us, hit):
    assert bool(guards.timed_kernels_flag(checked, timed, checked_us, timed_us)) is hit


def test_timed_kernels_flag_by_name():
    """Same launch count and time, another kernel: the compared calls' softmax kernel
    replaced by a copy while timed."""
    hit = guards.timed_kernels_flag(1, 1.0, 10.0, 10.0, {"softmax_kernel": 1.0}, {"copy_kernel": 1.0})
    assert hit and hit[0][0] == "unprofiled_behaviour" and "softmax_kernel" in hit[0][1]
    assert not guards.timed_kernels_flag(1, 1.0, 10.0, 10.0, {"softmax_kernel": 1.0}, {"softmax_kernel": 1.0})
    c = profile.classify({"top": [{"name": "softmax_kernel", "time_us": 4.0, "calls": 6}], "calls": 3,
                          "total_us": 8.0}, ["softmax_kernel"])
    assert c["by_name"] == {"softmax_kernel": 2.0}


def test_new_flags_are_registered():
    assert {"host_work", "unprofiled_behaviour"} <= set(guards.FLAGS)


# --------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
def test_gpu_audit_records_kernels_copies_and_attribution():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import triton
    import triton.language as tl

    @triton.jit
    def twice_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=m), mask=m)

    x = torch.randn(1 << 20, device="cuda")

    def fn(t):
        y = torch.empty_like(t)
        twice_kernel[(triton.cdiv(t.numel(), 1024),)](t, y, t.numel(), BLOCK=1024)
        return torch.relu(y), t.cpu()

    fn(x)
    _, a = audited_call(torch, fn, [x], gpu=True)
    c = profile.classify(a["table"], ["twice_kernel"])
    assert c["custom_launches"] == 1 and 0 < c["time_coverage"] < 1
    assert a["dtoh_bytes"] >= x.numel() * 4
    ref, cand = profile.marked(profile.REF, torch.relu), profile.marked(profile.CAND, fn)
    with profile.recording(torch) as prof:
        for _ in range(3):
            ref(x)
            cand(x)
        torch.cuda.synchronize()
    t = profile.timed_table(prof, cand.calls)
    assert profile.classify(t, ["twice_kernel"])["custom_launches"] == 3
    assert sum(r["calls"] for r in t["top"]) == 6  # its own kernel and its relu: never the reference's relu


def test_an_unknown_coverage_is_never_a_pass():
    """Neither time nor work readable: ``low_coverage`` (red team, round seven: an uncompiled
    CUDA text made the work unknown on the CPU and nothing was flagged)."""
    from davinci_kernel.evaluate.harness import guards

    assert guards.coverage_flag(None, 0.1, "coverage")[0][0] == "low_coverage"
    assert guards.coverage_flag(0.1, 0.1, "coverage") == []
    assert guards.coverage_flag(0.0999, 0.1, "coverage")[0][0] == "low_coverage"


@pytest.mark.parametrize("write,least", [
    (lambda: torch.linspace(0.25, 0.75, 2), 2),  # both ends handed from Python
    (lambda: torch.arange(1.5, 9.5, 4.0), 2),
    (lambda: torch.empty(7, 3).fill_(0.5), 1),  # a Python value, whatever the size
    (lambda: torch.empty(5).zero_(), 0)])  # a constant, no Python value (a scalar's zero_ counts once)
def test_values_from_python_are_host_writes(write, least):
    """Red team, round seven: values computed in Python came back through
    ``linspace(a, b, 2)`` pairs and ``fill_`` of larger tensors without a host write counted."""
    from davinci_kernel.evaluate.shared.audit import audited_call

    _, a = audited_call(torch, write, [], all_threads=True, strict=True)
    assert a["host_writes"] >= least and (least or a["host_writes"] == 0)
