"""Credit from the candidate's own execution: a custom kernel's work read from its source over
its recorded launches (kernelwork.py, tritonlaunch.py, cudawork.py), every aten op classified on
purpose from torch's own metadata (opwork.op_class), and the credit fixtures judged end to end on the CPU.

The attack fixtures (Strassen and a wasteful reference behind copy kernels, copy decoys)
are in tests/fixtures/cheats/ and run with every other cheat (test_evaluate_cheats.py)."""

from __future__ import annotations

import ast

import pytest
import torch
from conftest import FIXTURES, fixture_meta, fixture_task

from davinci_kernel.evaluate.shared import kernelwork, opwork, tritonlaunch
from davinci_kernel.evaluate.shared.audit import audited_call, launch_kinds
from davinci_kernel.evaluate.shared.cudawork import cuda_computes
from davinci_kernel.evaluate.shared.tritonlaunch import launch_work
from davinci_kernel.pysource import parse

T = lambda n: ["t", n]  # noqa: E731 - a recorded tensor argument


def _facts(path) -> dict:
    return kernelwork.analyze((FIXTURES / path).read_text())


def test_a_gemm_earns_its_multiply_adds_over_the_grid_and_its_loop():
    f = _facts("legit/matmul_relu_triton.py")
    M, N, K = 128, 64, 96  # 2 x 1 programs of 64 x 64, the K loop three times 32
    args = dict(a_ptr=T(M * K), b_ptr=T(K * N), c_ptr=T(M * N), M=M, N=N, K=K, sam=K, sak=1, sbk=N, sbn=1, scm=N,
                scn=1, BM=64, BN=64, BK=32)
    work, moved = launch_work(f, "matmul_relu_kernel", 2, args)
    assert work == pytest.approx(2 * 64 * 64 * 96 * 2 + 2 * (3 * 64 * 64 + 64 * 64))  # dots, accumulation, ReLU
    assert moved == 0


@pytest.mark.parametrize("loop", ["while k0 < K:", "while k0 <= K - 1:"])
def test_a_counted_while_loop_earns_what_the_range_loop_does(loop):
    """A K loop written ``while k0 < K: ... k0 += BK`` earns its trips (red team, round
    eight: counted once, a third of the work)."""
    src = (FIXTURES / "legit" / "matmul_relu_triton.py").read_text()
    head = "    for k0 in range(0, K, BK):\n"
    tail = "        acc += tl.dot(a, b)\n"
    assert head in src and tail in src, "the fixture's K loop moved"
    new = src.replace(head, f"    k0 = 0\n    {loop}\n").replace(tail, tail + "        k0 += BK\n")
    M, N, K = 128, 64, 96
    args = dict(a_ptr=T(M * K), b_ptr=T(K * N), c_ptr=T(M * N), M=M, N=N, K=K, sam=K, sak=1, sbk=N, sbn=1, scm=N,
                scn=1, BM=64, BN=64, BK=32)
    want = launch_work(_facts("legit/matmul_relu_triton.py"), "matmul_relu_kernel", 2, args)[0]
    assert launch_work(kernelwork.analyze(new), "matmul_relu_kernel", 2, args)[0] == pytest.approx(want)


def test_a_matmul_operator_in_a_kernel_earns_what_tl_dot_earns():
    """``a @ b`` on blocks is a dot (red team, round five: it was weighed as elementwise)."""
    src = (FIXTURES / "legit/matmul_relu_triton.py").read_text()
    assert "tl.dot(a, b" in src
    M, N, K = 128, 64, 96
    args = dict(a_ptr=T(M * K), b_ptr=T(K * N), c_ptr=T(M * N), M=M, N=N, K=K, sam=K, sak=1, sbk=N, sbn=1, scm=N,
                scn=1, BM=64, BN=64, BK=32)
    want = launch_work(kernelwork.analyze(src), "matmul_relu_kernel", 2, args)[0]
    at = src.replace("tl.dot(a, b", "(a @ b", 1)
    assert at != src
    assert launch_work(kernelwork.analyze(at), "matmul_relu_kernel", 2, args)[0] == pytest.approx(want)


@pytest.mark.parametrize("path,name", [("cheats/strassen_copy.py", "copy_kernel"),
                                       ("cheats/diag_broadcast_copy.py", "copy_kernel")])
def test_a_copy_kernel_earns_no_compute(path, name):
    work, moved = launch_work(_facts(path), name, 4, dict(x_ptr=T(4096), y_ptr=T(4096), n=4096, BLOCK=1024))
    assert work == 0 and moved == 4096


def test_index_arithmetic_on_loaded_values_and_identities_earn_nothing():
    f = _facts("cheats/copy_decoy_gather.py")
    work, moved = launch_work(f, "gather_rows", 3, dict(x_ptr=T(7680), idx_ptr=T(96), y_ptr=T(7680),
                                                                     rows=96, cols=80, ROWS=32, BLOCK=128))
    assert work == 0 and moved == 96 * 80  # 3 x 32 x 128 lanes, of which y's 7680 elements land


def test_real_arithmetic_earns_its_elements():
    f = _facts("legit/diag_scale_triton.py")
    work, _ = launch_work(f, "row_scale", 3, dict(d_ptr=T(96), b_ptr=T(7680), y_ptr=T(7680), rows=96,
                                                              cols=80, ROWS=32, BLOCK=128))
    assert work == 96 * 80  # 3 x 32 x 128 lanes; the multiply lands on y's 7680 elements
    soft = _facts("legit/attention_softmax_triton.py")
    work, _ = launch_work(soft, "softmax_rows", 2, dict(x_ptr=T(16384), y_ptr=T(16384), rows=128,
                                                                    cols=128, ROWS=64, BLOCK=128))
    assert work == 2 * 5 * 64 * 128  # max, subtract, exp, sum, divide


def test_work_is_counted_once_however_often_it_is_stored_and_the_cheaper_branch_counts():
    src = '''
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, flag_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.exp(tl.load(x_ptr + offs))
    for i in range(0, 100):
        tl.store(y_ptr + offs, v)
    if tl.load(flag_ptr) > 0:
        for j in range(0, 1000):
            v = tl.sqrt(v) + v
    tl.store(y_ptr + offs, v)
'''
    work, _ = launch_work(kernelwork.analyze(src), "k", 1, dict(x_ptr=T(8), flag_ptr=T(1), y_ptr=T(8), BLOCK=8))
    assert work == 8  # the exp once; a branch on read data counts its cheaper side


def test_an_index_guard_counts_its_body():
    """``if row < n_rows:`` around the whole body (program ids, aranges, arguments only) is a
    guard: the body counts, as past an early return (red team, round three: work read as 0)."""
    f = _facts("legit/softmax_if_guard.py")
    for rows, cols in ((8, 256), (7, 131), (1, 1)):
        block = 1 << max(0, (cols - 1).bit_length())
        w, _ = launch_work(f, "softmax_kernel", rows, dict(x_ptr=T(rows * cols), y_ptr=T(rows * cols), n_rows=rows,
                                                           n_cols=cols, stride=cols, BLOCK=block))
        assert w == rows * 5 * cols  # max, subtract, exp, sum, divide per element stored (masked lanes: none)


def test_cuda_sources_say_whether_they_compute():
    src = r'''
__global__ void copy(const float* __restrict__ a, float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // index arithmetic only
    if (i < n) b[i] = a[i];
}
__global__ void gather(const float* a, const long* idx, float* b, int n) {
    const float* row = a + idx[blockIdx.x] * n;
    b[blockIdx.x * n + threadIdx.x] = row[threadIdx.x];
}
__global__ void relu(const float* a, float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = a[i]; b[i] = v > 0.f ? v : 0.f; }
}
__global__ void tiled(const float* A, const float* B, float* C, int N) {
    __shared__ float As[16][16];
    __shared__ float Bs[16][16];
    float sum = 0.0f;
    for (int t = 0; t < N / 16; ++t) {
        As[threadIdx.y][threadIdx.x] = A[threadIdx.y * N + t * 16 + threadIdx.x];
        Bs[threadIdx.y][threadIdx.x] = B[(t * 16 + threadIdx.y) * N + threadIdx.x];
        __syncthreads();
        for (int k = 0; k < 16; ++k) sum += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    C[threadIdx.y * N + threadIdx.x] = sum;
}
__global__ void tilecopy(const float* A, float* C, int N) {
    __shared__ float T[32][33];
    T[threadIdx.y][threadIdx.x] = __ldg(&A[threadIdx.y * N + threadIdx.x]);
    __syncthreads();
    C[threadIdx.x * N + threadIdx.y] = T[threadIdx.x][threadIdx.y];
}
'''
    assert cuda_computes(src) == {"copy": False, "gather": False, "relu": True, "tiled": True,
                                             "tilecopy": False}


def test_custom_work_reads_untrusted_rows_and_believes_only_the_runs_the_gpu_saw():
    f = _facts("legit/diag_scale_triton.py")
    args = dict(d_ptr=T(96), b_ptr=T(7680), y_ptr=T(7680), rows=96, cols=80, ROWS=32, BLOCK=128)
    one = launch_work(f, "row_scale", 3, args)[0]
    rows = [["row_scale", 3, args, 2], "junk", ["row_scale", "3", args, 1], ["nope", 3, {}, 5], [1, 2, 3, 4]]
    assert kernelwork.custom_work(rows, f, False) == pytest.approx(2 * one + 32 * 128)  # a bad grid: 1 program
    assert kernelwork.custom_work(rows[:1], f, False, seen={"row_scale": 1.0}) == pytest.approx(one)
    assert kernelwork.custom_work(None, f, False) is None
    cuda = {"triton": {}, "cuda": {"k": True}}
    assert kernelwork.custom_work([], cuda, False, seen={"k": 1.0}) is None  # a computing CUDA kernel: unknown


def test_the_launch_wrapper_records_grid_and_arguments(monkeypatch):
    from davinci_kernel.evaluate.shared.audit import LaunchCounter, install_launch_counter

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # read when a function is decorated

    triton = pytest.importorskip("triton")
    import triton.language as tl

    install_launch_counter()

    @triton.jit
    def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

    x = torch.arange(8.0)
    y = torch.empty_like(x)
    LaunchCounter.log = []
    try:
        scale[lambda meta: (triton.cdiv(8, meta["BLOCK"]),)](x, y, 8, BLOCK=4)
        scale[(2,)](x, y, 8, BLOCK=4)
    finally:
        log, LaunchCounter.log = LaunchCounter.log, None
    assert torch.equal(y, 2 * x)
    assert launch_kinds(log) == [["scale", 2, {"x_ptr": ["t", 8], "y_ptr": ["t", 8], "n": 8, "BLOCK": 4}, 2]]


# --------------------------------------------------------------------------- ops from torch's metadata
def test_every_registered_aten_op_is_classified_on_purpose():
    """Each aten op torch registers is weighed by its elements, by a formula, by the ops it
    calls, does no work, or is declared all of the work; none falls to the default."""
    names = sorted({n[6:].split(".")[0] for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")})
    assert len(names) > 1000
    classes = {n: opwork.op_class(n) for n in names}
    assert [n for n, c in classes.items() if c == "unclassified"] == []
    for n in ("__and__", "__or__", "__xor__", "__lshift__", "__rshift__", "bitwise_and", "isfinite", "abs"):
        assert classes[n] == "elements", n
    assert classes["linalg_cholesky_ex"] == "all" and classes["_linalg_solve_ex"] == "all"
    assert classes["matmul"] == "composite" and classes["mm"] == "formula" and classes["view"] == "memory"


@pytest.mark.parametrize("op", ["&", "|", "^", "<<", ">>"])
def test_python_operators_on_tensors_are_weighed_by_their_elements(op):
    a = torch.randint(0, 7, (16, 8), dtype=torch.int32)
    b = torch.randint(0, 3, (16, 8), dtype=torch.int32)
    fn = eval(f"lambda x, y: x {op} y")  # noqa: S307 - a fixed operator
    work = audited_call(torch, fn, [a, b], all_threads=True, strict=True)[1]["work"]
    assert work == 16 * 8


def test_per_channel_tensors_do_not_broadcast_against_the_last_dimension_and_pointwise_ops_do():
    """A group or batch norm over (N, C, 1) with (C,) weights is N·C elements (it was N·C·C:
    the weight lined up with the trailing 1); a pointwise op's inputs broadcast (``lerp`` of
    a column and a row is their outer size), as an upsampling is weighed by its output."""
    import torch.nn.functional as F

    x, w = torch.randn(11, 200, 1), torch.randn(200)
    per = opwork.ELEMENT_WEIGHTS
    norm = audited_call(torch, lambda: F.group_norm(x, 1, w, w), [], all_threads=True, strict=True)[1]["work"]
    assert norm <= 11 * 200 * max(per.get("native_group_norm", 1), per.get("group_norm", 1))
    bn = audited_call(torch, lambda: F.batch_norm(x, None, None, w, w, training=True), [], all_threads=True,
                      strict=True)[1]["work"]
    assert bn <= 11 * 200 * per["native_batch_norm"]
    col, row = torch.randn(300, 1), torch.randn(1, 70)
    lerp = audited_call(torch, lambda: torch.lerp(col, row, 0.25), [], all_threads=True, strict=True)[1]["work"]
    assert lerp >= 300 * 70
    img = torch.randn(2, 3, 12, 12)
    up = audited_call(torch, lambda: F.interpolate(img, scale_factor=4, mode="bicubic"), [], all_threads=True,
                      strict=True)[1]["work"]
    assert up == 2 * 3 * 48 * 48 * per["upsample_bicubic2d"]


def test_a_reference_that_only_moves_data_is_known():
    assert opwork.moves_only({"cat": 1, "clone": 1}) and opwork.moves_only({})
    assert not opwork.moves_only({"cat": 1, "mul": 1})


# --------------------------------------------------------------------------- the fixtures, end to end
HONEST = ["matmul_mask_epilogue", "matmul_bitwise_epilogues", "diag_scale_triton", "transpose_triton",
          "concat_triton", "softmax_if_guard", "linear_gelu_two_kernels"]


@pytest.mark.parametrize("name", HONEST)
def test_honest_work_is_accepted_with_its_coverage(cpu_evaluator, name):
    path = FIXTURES / "legit" / f"{name}.py"
    res = cpu_evaluator.evaluate(fixture_task(fixture_meta(path)["task"]), path.read_text())
    assert res.correct, (res.error_kind, res.flags, res.error_msg)
    assert res.coverage is not None and res.coverage > 0.85, res.coverage


def test_honest_partial_work_reports_its_true_coverage(cpu_evaluator):
    """Torch's GEMMs with a Triton softmax: the softmax's share of the executed work (under a
    percent: torch's share is read in one pass per element op too, where the fused softmax
    is one pass) is reported; below the floor it is low_coverage, as a torch GEMM with a
    custom epilogue is."""
    path = FIXTURES / "legit" / "attention_softmax_triton.py"
    doc = ast.get_docstring(parse(path.read_text())) or ""
    assert "partial: yes" in doc
    res = cpu_evaluator.evaluate(fixture_task("attention_small"), path.read_text())
    assert 0.0005 < res.coverage < 0.05, res.coverage
    assert not res.correct and "low_coverage" in res.flags


_LANES = '''
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, big_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.STORE(y_ptr + offs, tl.exp(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)
'''


@pytest.mark.parametrize("n", [1, 37, 1536, 4099])
def test_masked_off_lanes_earn_nothing_whatever_the_block_grid_or_other_tensors(n):
    """A store lands on at most the elements its tensor has: a block far larger than the
    tensor, a grid far larger (beside a large unrelated tensor that lets every program
    count as useful), or a store repeated at one address earn the elements, not the lanes;
    an atomic store may land ``SPREAD`` times (split-K partial sums). Red team: one program
    of 65536 lanes doing a 1536-element addition read as half the work."""
    f = kernelwork.analyze(_LANES.replace("STORE", "store"))
    for programs, block in ((1, 65536), (1000, 1024), (3, 2048)):
        args = dict(x_ptr=T(n), big_ptr=T(1 << 24), y_ptr=T(n), n=n, BLOCK=block)
        assert launch_work(f, "k", programs, args)[0] == min(n, programs * block)
    atomic = kernelwork.analyze(_LANES.replace("STORE", "atomic_add"))
    args = dict(x_ptr=T(n), big_ptr=T(1), y_ptr=T(n), n=n, BLOCK=65536)
    exp_and_add = launch_work(atomic, "k", 8, args)[0]
    assert exp_and_add == 2 * min(tritonlaunch.SPREAD * n, 8 * 65536)


def test_a_grid_larger_than_its_tensors_and_an_exit_on_read_data_earn_nothing_more():
    f = _facts("cheats/diag_broadcast_copy.py")  # its copy kernel, timed on 16 elements with 1000 programs
    src = (FIXTURES / "legit" / "relu_triton.py").read_text()
    relu = kernelwork.analyze(src)
    name = next(iter(relu["triton"]))
    params = [a.arg for a in relu["triton"][name].args.args]
    args = {params[0]: T(16), params[1]: T(16), params[2]: 16, params[3]: 1024}
    work, _ = launch_work(relu, name, 1000, args)
    assert work == 16  # the 16 elements stored, not 1000 programs (nor one) of 1024 lanes
    assert launch_work(f, "copy_kernel", 1, dict(x_ptr=T(16), y_ptr=T(16), n=16, BLOCK=16))[0] == 0
    exits = '''
import triton
import triton.language as tl


@triton.jit
def k(flag_ptr, x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    if tl.program_id(0) * BLOCK >= n:
        return
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.sqrt(tl.load(x_ptr + offs)))
    if tl.load(flag_ptr) > 1:
        return
    tl.store(y_ptr + offs, tl.exp(tl.load(x_ptr + offs)))
'''
    w, m = launch_work(kernelwork.analyze(exits), "k", 1, dict(flag_ptr=T(1), x_ptr=T(8), y_ptr=T(8), n=8,
                                                                          BLOCK=8))
    assert (w, m) == (8, 0)  # past the index guard the rest counts (sqrt); a guard on read data ends it (exp)


@pytest.mark.gpu
@pytest.mark.parametrize("name", HONEST + ["attention_softmax_triton"])
def test_credit_fixtures_on_the_gpu(gpu_evaluator, name):
    """The honest credit fixtures at full size on a GPU: accepted, with coverage the lower of
    their work share and time share (the partial one: reported, below the floor)."""
    path = FIXTURES / "legit" / f"{name}.py"
    res = gpu_evaluator.evaluate(fixture_task(fixture_meta(path)["task"]), path.read_text())
    evidence = res.timing_detail.get("evidence") or {}
    print(name, res.correct, res.coverage, evidence.get("work_coverage"), evidence.get("time_coverage"), res.speedup)
    if name == "attention_softmax_triton":
        assert not res.correct and "low_coverage" in res.flags and res.coverage is not None
        return
    assert res.correct, (res.error_kind, res.flags, res.error_msg)
    assert evidence.get("work_coverage") is not None and evidence["work_coverage"] > 0.85


# Ops whose committed weights are recounted from the installed torch (few OpInfos each, so fast):
# the normalizations, an activation, a loss, a variance, a scan with a decomposition of ours,
# and two reached only from their schemas (a GPU library's batch norm, the fused RMS norm).
RECOUNTED = ("native_batch_norm", "native_layer_norm", "gelu", "elu", "var", "mse_loss", "hardswish", "logcumsumexp",
             "log_sigmoid_forward", "cudnn_batch_norm", "fused_rms_norm")


def test_op_weights_match_the_installed_torchs_decompositions():
    """``op_weights.json`` is what ``opweights.py`` counts from this torch's decompositions (a
    subset recounted: a torch upgrade that changes them is noticed here), and ``opwork``
    weighs element ops by it."""
    import json

    from davinci_kernel.evaluate.shared import opweights

    doc = json.loads(opweights.TABLE.read_text())
    ops = doc["ops"]
    assert opwork.ELEMENT_WEIGHTS == {k: float(v["weight"]) for k, v in ops.items() if v["weight"] != 1}
    sources = {s for k in RECOUNTED for s in ops[k]["from"] if s != opweights.SIMPLE}
    recounted = opweights.records(opweights.generate(opinfos=sources, keys=set(RECOUNTED)))
    changed = {k: (ops[k], recounted.get(k)) for k in RECOUNTED if recounted.get(k) != ops[k]}
    assert not changed, (f"op_weights.json was counted under torch {doc['torch']}, this is {torch.__version__}: "
                         f"rerun python -m davinci_kernel.evaluate.shared.opweights ({changed})")


def _bn(train: bool):
    import torch.nn.functional as F

    return lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, train, 0.1, 1e-5)


_X, _C = torch.randn(8, 16, 12), torch.rand(16) + 0.5
FUSED = {  # red team, round seven: each was weighed once per element
    "batch_norm_training": (_bn(True), (_X, _C.clone(), _C.clone(), _C, _C)),
    "batch_norm_eval": (_bn(False), (_X, _C.clone(), _C.clone(), _C, _C)),
    "instance_norm": (torch.nn.functional.instance_norm, (_X,)),
    "logcumsumexp": (lambda x: torch.logcumsumexp(x, -1), (_X,)),
    "var": (lambda x: torch.var(x, -1), (_X,)), "std": (lambda x: torch.std(x, -1), (_X,)),
    "mse_loss": (torch.nn.functional.mse_loss, (_X, torch.randn_like(_X))),
    "log_sigmoid": (torch.nn.functional.logsigmoid, (_X,)), "hardswish": (torch.nn.functional.hardswish, (_X,)),
    "elu": (torch.nn.functional.elu, (_X,)),
}


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_ops_weigh_at_least_what_their_decompositions_do(name):
    """A torch call is weighed (``opwork.profiled_work`` over its profiled ops) at least the
    full-size compute ops of its decomposition per element (``opweights.count``, traced down
    to primitives): two batch norms are no cheaper than the layer norm they make."""
    from torch.profiler import ProfilerActivity, profile

    from davinci_kernel.evaluate.shared import opweights

    fn, args = FUSED[name]
    ops = opweights.count(fn, args, {}, opweights.decompositions()).ops
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn(*args)
    work = opwork.profiled_work(prof.events())
    assert len(ops) >= 2, ops
    assert work >= len(ops) * _X.numel(), (name, work / _X.numel(), ops)


# --------------------------------------------------------------------------- work that reaches the output
_CHAIN = '''
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, s_ptr, y_ptr, n, a, b, iters, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    s = tl.load(s_ptr)
    for _i in range(iters):
        x = EXPR
    tl.store(y_ptr + offs, x, mask=offs < n)
'''


@pytest.mark.parametrize("expr,ops", [("x * 2.0 * 0.5", 0), ("x + 1.0 - 1.0", 0), ("(x - 3.0) + 3.0", 0),
                                      ("-(-x)", 0), ("x / 4.0 * 4.0", 0), ("x * a * b", 0), ("x * 0.0 + x", 0),
                                      ("x * 1.001", 1), ("x * 1.0000001", 0), ("x * s", 1), ("x * s + a", 2), ("3.0 - x", 2),
                                      ("tl.exp(x) * 0.0 + x", 0), ("tl.sqrt(x * x + 1.0)", 3 * 97)])
def test_arithmetic_that_cancels_or_repeats_an_affine_map_earns_little(expr, ops):
    """A chain of multiplies and adds by invariant coefficients is one affine map (a multiply
    and an add per element at most, however often a loop repeats it); one that composes to
    the identity earns nothing; real work on a carried value counts every trip. Odd sizes."""
    f = kernelwork.analyze(_CHAIN.replace("EXPR", expr))
    n, block = 1000, 256  # 4 programs, the last one part masked
    w, _ = launch_work(f, "k", 4, dict(x_ptr=T(n), s_ptr=T(1), y_ptr=T(n), n=n, a=2.0, b=0.5, iters=97, BLOCK=block))
    assert w == n * ops  # per element stored: the last program's masked lanes earn nothing


_PADDED = '''
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, t_ptr, y_ptr, n, iters, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    for i in range(iters):
        t = tl.load(t_ptr + (offs + i) % n, mask=offs < n)
        x = EXPR
    tl.store(y_ptr + offs, x, mask=offs < n)
'''


@pytest.mark.parametrize("expr,ops", [("(x + t) - t", 0), ("x * t / t", 0), ("(x + t * 1e-30) - t * 1e-30", 0),
                                      ("x * (1.0 + t) / (1.0 + t)", 0), ("((x + t) * 2.0 - 2.0 * t) * 0.5", 0),
                                      ("x - (t - t)", 0), ("(x * t + t) / t - 1.0", 0), ("x + t", 1),
                                      ("x * t + t", 2), ("(x + t) * t - t", 3)])
def test_arithmetic_that_cancels_on_loaded_values_earns_nothing(expr, ops):
    """Padding by values loaded in the loop, each trip a different one, that cancels
    (``tritonvalues.Poly``): the value stored is the one loaded, however much arithmetic it
    went through; real work on the carried value counts every trip (97). Odd sizes."""
    f = kernelwork.analyze(_PADDED.replace("EXPR", expr))
    n, block = 1000, 256
    w, _ = launch_work(f, "k", 4, dict(x_ptr=T(n), t_ptr=T(n), y_ptr=T(n), n=n, iters=97, BLOCK=block))
    assert w == n * ops * 97


_SPREAD = '''
import triton
import triton.language as tl


@triton.jit
def k(s_ptr, x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32) + tl.load(s_ptr)
    acc = tl.exp(acc * 2.0 + 1.0)
    tl.store(y_ptr, tl.max(acc, axis=0) + tl.sum(tl.load(x_ptr + offs), axis=0))
'''


def test_a_value_spread_over_a_block_earns_what_it_holds_not_its_lanes():
    """A loaded scalar broadcast over 4096 lanes, worked on and reduced back: each op earns
    what the lanes hold (1 value), not 4096; a reduction of 4096 loaded values earns 4096."""
    f = kernelwork.analyze(_SPREAD)
    w, _ = launch_work(f, "k", 1, dict(s_ptr=T(1), x_ptr=T(4096), y_ptr=T(1), BLOCK=4096))
    assert w == 1 + 2 + 1 + 1 + 4096 + 1  # add, affine pair, exp, max; the sum; the final add


def test_a_constexpr_is_recorded_by_value_and_an_unrecorded_argument_is_unknown():
    tl = pytest.importorskip("triton.language")
    from davinci_kernel.evaluate.shared.audit import UNKNOWN, _arg

    assert _arg(tl.constexpr(0)) == 0 and _arg(tl.constexpr(2.5)) == 2.5
    assert _arg(object()) == UNKNOWN and _arg("s") == UNKNOWN
    f = _facts("cheats/work_unrecorded_constexpr.py")
    base = dict(x_ptr=T(999), y_ptr=T(999), n=999, BLOCK=1024)
    assert launch_work(f, "copy_kernel", 1, {**base, "ITERS": 0})[0] == 0  # recorded: no trip
    assert launch_work(f, "copy_kernel", 1, {**base, "ITERS": ["?"]})[0] == 999  # unknown: one trip, never 100000
    assert launch_work(f, "copy_kernel", 1, base)[0] == 999 * 100000  # not passed: the source default holds
    assert kernelwork._clean_args({"ITERS": ["?"], "junk": {}})["junk"] == ["?"]


_TWO = '''
import triton
import triton.language as tl


@triton.jit
def first(x_ptr, t_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(t_ptr + offs, tl.exp(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


@triton.jit
def second(t_ptr, x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.sqrt(tl.load(SRC + offs, mask=offs < n)), mask=offs < n)
'''


def _two(src: str, flow: dict, per_elem=None) -> float:
    n = 777  # odd: 1 program of 1024, masked (777 elements stored)
    f = kernelwork.analyze(_TWO.replace("SRC", src))
    kinds = [["first", 1, dict(x_ptr=T(n), t_ptr=T(n), n=n, BLOCK=1024), 1],
             ["second", 1, dict(t_ptr=T(n), x_ptr=T(n), y_ptr=T(n), n=n, BLOCK=1024), 1]]
    return kernelwork.custom_work(kinds, f, False, flow=flow, per_elem=per_elem)


def _flow(out, reads=(), t=(1, 0, 3108)):
    """Storages: 0 the input, 1 the temporary, 2 the output (777 float32 values each)."""
    x, y = [0, 0, 3108], [2, 0, 3108]
    return {"launches": [[0, {"x_ptr": x, "t_ptr": list(t)}], [1, {"t_ptr": list(t), "x_ptr": x, "y_ptr": y}]],
            "out": out, "reads": [list(r) for r in reads]}


def test_only_stores_that_reach_the_output_are_credited():
    out = [[2, 0, 3108]]
    assert _two("t_ptr", _flow(out)) == 2 * 777  # a pipeline through a temporary: both kernels
    assert _two("x_ptr", _flow(out)) == 777  # the temporary is not read by what reaches: only the second
    assert _two("t_ptr", _flow([])) == 0  # nothing returned that a kernel wrote
    assert _two("x_ptr", _flow([], reads=[(1, 1)])) == 777  # torch read the temporary after the first launch
    assert _two("x_ptr", _flow([], reads=[(1, 0)])) == 0  # ... before it: not what the kernel made
    assert _two("t_ptr", {**_flow([]), "reads": None}) == 2 * 777  # no op inputs recorded: every store
    assert _two("t_ptr", None) == 2 * 777  # no flow record at all: as the launches were recorded
    # half the output's bytes returned: half the second kernel's credit; it reads all of the temporary
    assert _two("t_ptr", _flow([[2, 0, 1554]])) == 777 / 2 + 777
    assert _two("t_ptr", _flow([[2, 1554, 3108], [2, 0, 1554]])) == 2 * 777
    assert _two("t_ptr", _flow(out), per_elem=0.25) == 2 * 777 * 0.25  # capped per element stored (777 elements each)


def test_stores_of_values_already_there_earn_nothing_and_their_sources_still_reach():
    """The second kernel's output holds, after it, what the tensor it read held before
    (``audit._copies``): its sqrt earns nothing, the first kernel's exp, which it read, still
    counts. A match with a tensor its stores were not read from, or one recorded for a tensor
    it did not write, changes nothing. An untrusted record of any other shape is ignored."""
    out = [[2, 0, 3108]]

    def flow(copies):
        f = _flow(out)
        f["launches"][1].append(copies)
        return f

    assert _two("t_ptr", flow({"y_ptr": ["t_ptr"]})) == 777  # the copy earns nothing; the exp it moved does
    assert _two("t_ptr", flow({"y_ptr": ["x_ptr"]})) == 2 * 777  # equals a tensor it did not read from
    assert _two("t_ptr", flow({"t_ptr": ["t_ptr"], "x_ptr": ["x_ptr"]})) == 2 * 777  # inputs it only read
    assert _two("t_ptr", flow({"y_ptr": "t_ptr"})) == 2 * 777  # not a list: ignored
    assert _two("t_ptr", flow(["y_ptr"])) == 2 * 777
    # the temporary held one value when the second launch began (ones built at construction):
    # read as that constant, sqrt of it is no work, and nothing the first launch made reaches
    f = flow({})
    f["launches"][1].append({"t_ptr": 4.0})
    assert _two("t_ptr", f) == 0
    f["launches"][1][3] = {"t_ptr": 4.0, "y_ptr": 0.0}  # an output that was all zeros keeps the others constant
    assert _two("t_ptr", f) == 0
    f["launches"][1][3] = {"t_ptr": "4"}  # not a number: ignored
    assert _two("t_ptr", f) == 2 * 777


def test_the_launch_wrapper_records_where_launches_wrote(monkeypatch):
    """The worker's flow record: each launch's tensors as [storage, first byte, end byte], the
    output's extents, the latest torch read of each launch storage; a scratch buffer inside
    the output's own storage is told apart by its bytes."""
    from davinci_kernel.evaluate.shared.audit import LaunchCounter, install_launch_counter

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    triton = pytest.importorskip("triton")
    import triton.language as tl

    install_launch_counter()

    @triton.jit
    def twice(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

    def call(x):
        big = torch.empty(2 * 37)
        scratch = torch.empty(37)
        twice[(1,)](x, scratch, 37, BLOCK=64)
        s = scratch.sum()
        twice[(1,)](x, big[37:], 37, BLOCK=64)
        return big[:37] + s

    LaunchCounter.log = []
    try:
        _, a = audited_call(torch, call, [torch.randn(37)], all_threads=True, strict=True)
    finally:
        log, LaunchCounter.log = LaunchCounter.log, None
    flow = a["flow"]
    (k0, e0, c0, _), (k1, e1, c1, _) = flow["launches"]
    assert c0 == c1 == {}  # y = 2x; x is the call's own input (never a source of a copy)
    assert k0 == k1 == 0 and e0["x_ptr"] == e1["x_ptr"] == [0, 0, 148]
    assert e0["y_ptr"][1:] == [0, 148] and e1["y_ptr"][1:] == [148, 296]
    assert flow["out"] == []  # the output is torch's new tensor
    reads = dict(map(tuple, flow["reads"]))
    assert reads[e0["y_ptr"][0]] == 1 and reads[e1["y_ptr"][0]] == 2  # the sum after the first; the add after both
    assert launch_kinds(log)[0][3] == 2


# --------------------------------------------------------------------------- red team, round five
def test_the_worker_records_a_launch_whose_output_holds_what_it_read_outside_the_profile(monkeypatch):
    """A copy of torch's answer through ``(v + s) - s`` and a tiny weight: after the launch
    its output holds what its input held (``audit._copies``); a real doubling does not, nor
    does a copy of the call's own input. The comparison itself leaves nothing in the call's
    record (no torch work, no reads to the host)."""
    from davinci_kernel.evaluate.shared.audit import LaunchCounter, install_launch_counter

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    triton = pytest.importorskip("triton")
    import triton.language as tl

    install_launch_counter()

    @triton.jit
    def padded(x_ptr, s_ptr, y_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=offs < n)
        s = tl.load(s_ptr + offs, mask=offs < n)
        tl.store(y_ptr + offs, ((v + s) - s) * SCALE + s * 1e-30, mask=offs < n)

    ones = torch.ones(37)  # built before the call, as at construction

    def call(x, s):
        h = torch.relu(x)  # torch's answer
        y, z, w = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
        padded[(1,)](h, s, y, 37, SCALE=1.0, BLOCK=64)
        padded[(1,)](h, s, z, 37, SCALE=2.0, BLOCK=64)
        padded[(1,)](x, ones, w, 37, SCALE=1.0, BLOCK=64)
        return y, z, w

    LaunchCounter.log = []
    try:
        _, a = audited_call(torch, call, [torch.randn(37), torch.randn(37)], all_threads=True, strict=True)
    finally:
        LaunchCounter.log = None
    (_, _, first, u1), (_, _, second, _), (_, _, third, u3) = a["flow"]["launches"]
    assert first["y_ptr"] == ["x_ptr"] and "y_ptr" not in second
    assert "y_ptr" not in third  # the call's own input, unchanged: an identity on it is the problem's (a ReLU)
    assert "s_ptr" not in u1 and u3["s_ptr"] == 1.0  # a buffer of ones reads as the constant 1
    assert a["work"] == 37 and a["items"] == 0 and a["dtoh_bytes"] == 0  # torch's ReLU alone


def test_torch_writes_after_a_launch_replace_its_bytes():
    """The temporary (storage 1, 3108 bytes) written by the first launch: a torch read after
    it keeps the credit, a whole-storage torch write before that read takes it away, a
    partial write takes its share; the output replaced by torch after the second launch
    takes the second's."""
    out = [[2, 0, 3108]]
    flow = {**_flow([], reads=[(1, 1)]), "access": [[1, 1, 0, 3108]], "nbytes": [[1, 3108], [2, 3108]]}
    assert _two("x_ptr", flow) == 777  # read by torch after the first launch
    flow["access"] = [[1, 1, 1, 3108], [1, 1, 0, 3108]]  # replaced, then read: nothing of the launch's
    assert _two("x_ptr", flow) == 0
    flow["access"] = [[1, 1, 1, 1036], [1, 1, 0, 3108]]  # a third replaced first
    assert _two("x_ptr", flow) == pytest.approx(777 * 2 / 3, rel=1e-3)
    flow["access"] = [[1, 1, 0, 3108], [1, 1, 1, 3108]]  # read first, replaced after: kept
    assert _two("x_ptr", flow) == 777
    over = {**_flow(out), "access": [[2, 2, 1, 3108]], "nbytes": [[1, 3108], [2, 3108]]}
    assert _two("t_ptr", over) == 0  # the output's bytes replaced after the last launch
    over["access"] = [[2, 1, 1, 3108]]  # ... before the second launch wrote them: no matter
    assert _two("t_ptr", over) == 2 * 777


def test_the_flow_record_tells_reads_from_metadata_and_writes(monkeypatch):
    """A discarded view reads nothing; ``copy_`` and an ``out=`` argument write; a sum reads."""
    from davinci_kernel.evaluate.shared.audit import READ, WRITE, LaunchCounter, install_launch_counter

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    triton = pytest.importorskip("triton")
    import triton.language as tl

    install_launch_counter()

    @triton.jit
    def twice(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

    def call(x):
        a, b, c = torch.empty(37), torch.empty(37), torch.empty(37)
        for t in (a, b, c):
            twice[(1,)](x, t, 37, BLOCK=64)
        a.view(-1).select(0, 3)
        b.copy_(x)
        torch.add(x, x, out=c)
        return a.sum() + b + c

    LaunchCounter.log = []
    try:
        _, a = audited_call(torch, call, [torch.randn(37)], all_threads=True, strict=True)
    finally:
        LaunchCounter.log = None
    flow = a["flow"]
    sa, sb, sc = (flow["launches"][i][1]["y_ptr"][0] for i in range(3))
    acc = [(r[0], r[2]) for r in flow["access"] if r[1] == 3]
    assert acc.index((sb, WRITE)) < acc.index((sc, WRITE)) < acc.index((sa, READ))
    assert (sb, WRITE) in acc and (sc, WRITE) in acc and acc.count((sa, READ)) == 1  # the sum only
    got = kernelwork.custom_work(launch_kinds([[r[0], (1,), r[2]] for r in [["twice", 0, {
        "x_ptr": T(37), "y_ptr": T(37), "n": 37, "BLOCK": 64}]] * 3]), kernelwork.analyze(_TWICE), False, flow=flow)
    assert got == 37  # only the launch into ``a`` (read by the sum) is credited


_TWICE = '''
import triton
import triton.language as tl


@triton.jit
def twice(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)
'''

_GUARDS = '''
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, n, steps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    acc = tl.load(x_ptr + offs, mask=offs < n)
    if COND:
        for i in range(steps):
            acc = tl.exp(acc)
    tl.store(y_ptr + offs, acc, mask=offs < n)
'''


@pytest.mark.parametrize("cond,programs,counted", [
    ("pid < 0", 3, False), ("pid >= 3", 3, False), ("pid * BLOCK > 2 * 37", 3, False),
    ("pid < 3", 3, True), ("pid >= 0", 5, True), ("pid < n", 3, True),  # n = 37 known: always true
    ("pid < steps - 4", 7, None),  # 1 of 7 ... undecidable: counts as a guard
    ("pid % 2 == 5", 3, False), ("pid // 2 > 1", 3, False)])
def test_index_conditions_are_decided_over_value_ranges(cond, programs, counted):
    f = kernelwork.analyze(_GUARDS.replace("COND", cond))
    w, _ = launch_work(f, "k", programs, dict(x_ptr=T(37), y_ptr=T(37), n=37, steps=5, BLOCK=13))
    assert (w > 0) == (counted is not False), (cond, w)


def test_loads_from_a_constant_fill_are_constants():
    """A kernel adding a loaded value ``steps`` times: from a tensor torch zero-filled
    before the launch it is no work; filled with 2.0, one add per element; refilled by a
    launch in between, or written by the launch itself, it is data again."""
    src = '''
import triton
import triton.language as tl


@triton.jit
def acc_kernel(y_ptr, z_ptr, out_ptr, n, steps, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.load(y_ptr + offs, mask=offs < n)
    for k in range(steps):
        acc = acc + tl.load(z_ptr + k)
    tl.store(out_ptr + offs, acc, mask=offs < n)
'''
    f = kernelwork.analyze(src)
    n, steps = 301, 23  # odd: 3 programs of 128, masked
    kinds = [["acc_kernel", 3, dict(y_ptr=T(n), z_ptr=T(steps), out_ptr=T(n), n=n, steps=steps, BLOCK=128), 1]]
    launch = [[0, {"y_ptr": [0, 0, 4 * n], "z_ptr": [1, 0, 4 * steps], "out_ptr": [2, 0, 4 * n]}]]

    def work(access):
        flow = {"launches": launch, "out": [[2, 0, 4 * n]], "reads": [], "access": access,
                "nbytes": [[0, 4 * n], [1, 4 * steps], [2, 4 * n]]}
        return kernelwork.custom_work(kinds, f, False, flow=flow)

    assert work([]) == n * steps  # data: each add counts (per element stored)
    assert work([[1, 0, 1, 4 * steps, 0.0]]) == 0  # zeros: no work
    assert work([[1, 0, 1, 4 * steps, 2.0]]) == n  # one add per element at most
    assert work([[1, 0, 1, 4 * steps, 0.0], [1, 0, 2, 4 * steps]]) == n * steps  # updated in place after
    assert work([[1, 0, 1, 8, 0.0]]) == n * steps  # only part filled


def test_a_strict_conv_is_weighed_by_its_formula_on_the_cpu():
    """Red team, round five: the CPU conv calls ``_nnpack_available`` and
    ``_slow_conv2d_forward`` (rated all); under strict the conv is its formula."""
    import torch.nn.functional as F

    for f, flops in [(lambda: F.conv2d(torch.randn(1, 3, 9, 11), torch.randn(4, 3, 1, 1)), 2 * 4 * 3 * 99),
                     (lambda: F.conv1d(torch.randn(2, 3, 17), torch.randn(4, 3, 3)), None),
                     (lambda: F.conv_transpose2d(torch.randn(1, 3, 5, 7), torch.randn(3, 4, 3, 3)), None),
                     (lambda: F.conv3d(torch.randn(1, 3, 5, 6, 7), torch.randn(4, 3, 2, 2, 2)), None),
                     (lambda: F.linear(torch.randn(5, 7), torch.randn(3, 7), torch.randn(3)), None),
                     (lambda: F.batch_norm(torch.randn(2, 3, 5, 7), torch.zeros(3), torch.ones(3)), None)]:
        _, a = audited_call(torch, f, [], all_threads=True, strict=True)
        assert a["work"] < 1e6, a
        if flops:
            assert a["work"] >= flops
    assert opwork.no_work("_nnpack_available")


def test_honest_torch_conv_with_a_triton_epilogue_passes(cpu_evaluator):
    path = FIXTURES / "legit" / "conv_then_chain_triton.py"
    res = cpu_evaluator.evaluate(fixture_task(fixture_meta(path)["task"]), path.read_text())
    assert res.correct, (res.error_kind, res.flags, res.error_msg)
    assert 0.5 < res.coverage < 0.95, res.coverage
