"""Correctness rules for every dtype, the transfer of every carried dtype, and the static
rejections of issue 16 (harness package, torch._C, _python_dispatch, ctypes/cffi, /proc
paths, torch.library registration). Unit tests, and one pass through the CPU evaluator
(an honest half-precision softmax beside the zeros fixture on the same task)."""

from __future__ import annotations

import glob
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from davinci_kernel.evaluate.harness.codepolicy import static  # noqa: E402
from davinci_kernel.evaluate.harness.correctness import REL_L2_LIMITS, compare  # noqa: E402
from davinci_kernel.evaluate.harness.guards import FLAGS  # noqa: E402
from davinci_kernel.evaluate.shared.transfer import _RAW, read_leaf, write_leaf  # noqa: E402

ATOL = RTOL = 1e-2
SHAPE = (7, 129)  # odd sizes: no power of two anywhere


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _noisy(ref: torch.Tensor, rel: float, seed: int = 1) -> torch.Tensor:
    """ref with relative Gaussian noise of size ``rel`` (computed in float64, rounded to ref's dtype)."""
    r = ref.double() if not ref.is_complex() else ref.to(torch.complex128)
    noise = torch.randn(r.shape, generator=_gen(seed), dtype=torch.float64)
    return (r * (1 + rel * noise)).to(ref.dtype)


def _softmax(dtype, rows: int = 6, dim: int = 16384) -> torch.Tensor:
    return torch.softmax(torch.randn(rows, dim, generator=_gen(), dtype=torch.float64), -1).to(dtype)


# --------------------------------------------------------------------------- compare(): floats
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_identical_outputs_pass(dtype):
    r = torch.randn(SHAPE, generator=_gen()).to(dtype)
    c = compare([r], [r.clone()], ATOL, RTOL)
    assert c.ok and c.rel_l2 == 0.0, c.message


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_honest_noise_at_1e3_passes(dtype):
    """Half-precision kernels KernelBench accepts differ from the reference by ~1e-3 rel-L2."""
    r = torch.randn(SHAPE, generator=_gen()).to(dtype)
    x = _noisy(r, 1e-3)
    c = compare([r], [x], ATOL, RTOL)
    assert c.ok, c.message
    assert 3e-4 < c.leaf_rel_l2[str(dtype).replace("torch.", "")] < 1e-2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_honest_softmax_in_float32_then_rounded_passes(dtype):
    """A kernel that computes softmax in float32 and rounds once, against torch's own."""
    x = (torch.randn(6, 4096, generator=_gen()) * 2).to(dtype)
    ref = torch.softmax(x, -1)
    cand = torch.softmax(x.float(), -1).to(dtype)
    assert compare([ref], [cand], ATOL, RTOL).ok


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_zeros_for_a_wide_softmax_fail(dtype):
    """Class 4: every value is below atol, so zeros pass allclose; rel-L2 is 1.0."""
    r = _softmax(dtype)
    zeros = torch.zeros_like(r)
    assert torch.allclose(zeros.float(), r.float(), atol=ATOL, rtol=RTOL)  # the hole this closes
    c = compare([r], [zeros], ATOL, RTOL)
    assert not c.ok and c.error_kind == "wrong_output"
    assert "relative L2 error 1 >" in c.message and "no" in c.message and "signal" in c.message


def test_uncorrelated_values_of_the_right_size_fail():
    r = _softmax(torch.float16)
    x = r[:, torch.randperm(r.shape[1], generator=_gen(3))]  # same values, wrong places
    c = compare([r], [x], ATOL, RTOL)
    assert not c.ok and c.error_kind == "wrong_output" and "relative L2" in c.message


def test_a_small_output_cannot_hide_behind_a_large_sibling():
    """Per output: zeros for a tiny second output fail although the whole is 1e-4 off."""
    big = torch.randn(64, 129, generator=_gen()).to(torch.float16) * 100
    small = _softmax(torch.float16)
    c = compare([big, small], [big.clone(), torch.zeros_like(small)], ATOL, RTOL)
    assert not c.ok and c.message.startswith("output 1:")
    assert c.rel_l2 < 1e-3  # what an aggregate check would have seen


def test_near_zero_reference_is_left_to_allclose():
    """An output that is cancellation noise in the reference: relative error means nothing."""
    r = torch.randn(SHAPE, generator=_gen(), dtype=torch.float32) * 1e-7
    x = torch.randn(SHAPE, generator=_gen(5), dtype=torch.float32) * 1e-7
    assert compare([r], [x], ATOL, RTOL).ok
    z = torch.zeros(SHAPE)
    assert compare([z], [z.clone()], ATOL, RTOL).ok
    assert compare([z], [x], ATOL, RTOL).ok


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.complex64])
def test_nan_never_passes(dtype):
    r = torch.ones(SHAPE, dtype=dtype)
    x = r.clone()
    x[3, 5] = float("nan")
    c = compare([r], [x], ATOL, RTOL)
    assert not c.ok and c.error_kind == "nan_inf"


def test_empty_outputs_pass():
    for dtype in (torch.float16, torch.complex64, torch.int32):
        e = torch.empty(0, 129, dtype=dtype)
        assert compare([e], [e.clone()], ATOL, RTOL).ok


def test_limits_are_one_table_per_dtype():
    assert {"float64", "float32", "float16", "bfloat16"} <= set(REL_L2_LIMITS)
    for lim in REL_L2_LIMITS.values():
        assert 0 < lim.rel_l2 < 0.5 and lim.floor > 0  # an output with no signal (rel-L2 ~1) always fails
    assert REL_L2_LIMITS["float16"].rel_l2 >= 1e-2 and REL_L2_LIMITS["bfloat16"].rel_l2 >= REL_L2_LIMITS["float16"].rel_l2


def test_limits_can_be_given():
    r = torch.randn(SHAPE, generator=_gen()).to(torch.float16)
    x = _noisy(r, 1e-3)
    strict = {"float16": REL_L2_LIMITS["float16"].__class__(1e-5, 1e-9)}
    assert compare([r], [x], ATOL, RTOL).ok and not compare([r], [x], ATOL, RTOL, limits=strict).ok


# --------------------------------------------------------------------------- compare(): complex
@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_compared_through_the_real_view(dtype):
    r = torch.fft.rfft(torch.randn(32, 256, generator=_gen(), dtype=torch.float64)).to(dtype)  # (32, 129)
    assert compare([r], [r.clone()], ATOL, RTOL).ok
    assert compare([r], [_noisy(r, 1e-4)], ATOL, RTOL).ok
    c = compare([r], [r.conj().resolve_conj()], ATOL, RTOL)  # imaginary parts negated
    assert not c.ok and c.error_kind == "wrong_output"
    small = r * 1e-4  # values below atol: only the relative check sees zeros
    c = compare([small], [torch.zeros_like(small)], ATOL, RTOL)
    assert not c.ok and "relative L2" in c.message


def test_one_complex_zero_for_a_32x129_output_fails():
    """Class 5: before, both crossed as "unsupported" and compared equal."""
    r = torch.fft.rfft(torch.randn(32, 256, generator=_gen()))
    c = compare([r], [torch.zeros(1, dtype=torch.complex64)], ATOL, RTOL)
    assert not c.ok and c.error_kind == "shape_mismatch"


def test_complex64_counts_as_float32_for_the_precision_guard():
    r = torch.randn(SHAPE, dtype=torch.complex64, generator=_gen())
    c = compare([r], [r.clone()], ATOL, RTOL)
    assert c.float32 and set(c.leaf_rel_l2) == {"float32"}


def test_complex32_compared_as_float16():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = torch.randn(SHAPE, dtype=torch.complex64, generator=_gen()).to(torch.complex32)
        assert compare([r], [r.clone()], ATOL, RTOL).ok
        z = torch.zeros(SHAPE, dtype=torch.complex32)
        c = compare([r * 1e-3], [z], ATOL, RTOL)
    assert not c.ok and "relative L2" in c.message


# --------------------------------------------------------------------------- compare(): exact types
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                                   torch.uint16, torch.uint32, torch.uint64, torch.bool])
def test_integer_and_bool_outputs_match_exactly(dtype):
    r = (torch.randint(0, 100, SHAPE, generator=_gen()) > 50) if dtype == torch.bool else \
        torch.randint(0, 100, SHAPE, generator=_gen()).to(dtype)
    assert compare([r], [r.clone()], ATOL, RTOL).ok
    x = r.clone()
    x.view(torch.uint8 if r.element_size() == 1 else {2: torch.int16, 4: torch.int32, 8: torch.int64}[r.element_size()])[0, 0] += 1
    c = compare([r], [x], ATOL, RTOL)
    assert not c.ok and c.error_kind == "wrong_output" and "1 of 903" in c.message


def test_float8_outputs():
    r = torch.randn(SHAPE, generator=_gen()).to(torch.float8_e4m3fn)
    assert compare([r], [r.clone()], ATOL, RTOL).ok
    one_ulp = (r.view(torch.uint8) ^ (torch.rand(SHAPE, generator=_gen(2)) < 0.3).to(torch.uint8)).view(r.dtype)
    assert compare([r], [one_ulp], ATOL, RTOL).ok  # rounding-level differences on 30 % of values
    c = compare([r.float().mul(1e-2).to(r.dtype)], [torch.zeros_like(r)], ATOL, RTOL)
    assert not c.ok
    e8 = torch.rand(SHAPE, generator=_gen()).add(0.5).to(torch.float8_e8m0fnu)
    assert compare([e8], [e8.clone()], ATOL, RTOL).ok


# --------------------------------------------------------------------------- compare(): unsupported
def test_two_unsupported_leaves_never_compare_equal():
    meta = {"kind": "unsupported", "dtype": "complex64", "shape": [32, 129]}
    c = compare([meta], [{"kind": "unsupported", "dtype": "complex64", "shape": [1]}], ATOL, RTOL)
    assert not c.ok and c.error_kind == "unsupported_output"
    assert "reference" in c.message and "complex64" in c.message


@pytest.mark.parametrize("make", [
    lambda: torch.randn(SHAPE).to_sparse(),
    lambda: torch.quantize_per_tensor(torch.randn(SHAPE), 0.1, 0, torch.qint8),
    lambda: torch.empty(SHAPE, device="meta"),
    lambda: torch.empty(SHAPE, dtype=torch.uint4) if hasattr(torch, "uint4") else object(),
], ids=["sparse", "quantized", "meta", "uint4"])
def test_uncomparable_tensors_fail_with_unsupported_output(make):
    dense = torch.randn(SHAPE)
    x = make()
    for ref, cand in (([dense], [x]), ([x], [x])):
        c = compare(ref, cand, ATOL, RTOL)
        assert not c.ok and c.error_kind == "unsupported_output", c.message


def test_unsupported_candidate_leaf_from_transfer_fails():
    c = compare([torch.randn(SHAPE)], [{"kind": "unsupported", "dtype": "qint8", "shape": [7, 129],
                                       "why": "a quantized tensor (qint8)"}], ATOL, RTOL)
    assert not c.ok and c.error_kind == "unsupported_output" and "quantized" in c.message


def test_objects_where_a_tensor_is_expected_fail():
    c = compare([torch.randn(SHAPE)], [{"kind": "scalar", "value": "tensor(...)"}], ATOL, RTOL)
    assert not c.ok and c.error_kind == "output_structure"
    c = compare([torch.randn(SHAPE)], [object()], ATOL, RTOL)
    assert not c.ok and c.error_kind == "unsupported_output"


def test_scalars():
    s = lambda v: {"kind": "scalar", "value": v}  # noqa: E731
    assert compare([s(1.0)], [s(1.0 + 1e-6)], ATOL, RTOL).ok
    assert not compare([s(1.0)], [s(float("nan"))], ATOL, RTOL).ok
    assert not compare([s(1)], [s(True)], ATOL, RTOL).ok
    assert compare([s(3)], [s(3)], ATOL, RTOL).ok


# --------------------------------------------------------------------------- transfer
def _sample(name: str) -> torch.Tensor:
    dtype = getattr(torch, name)
    base = torch.randn(5, 6, 7, generator=_gen(), dtype=torch.complex128 if dtype.is_complex else torch.float64) * 4
    if dtype == torch.bool:
        return base > 0
    if not dtype.is_floating_point and not dtype.is_complex:
        return base.abs().to(torch.int64).clamp(0, 100).to(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ComplexHalf is experimental
        return base.to(dtype) if dtype != torch.float8_e8m0fnu else base.abs().add(0.1).float().to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@pytest.mark.parametrize("plain_write", [False, True], ids=["from_file", "plain_write"])
@pytest.mark.parametrize("name", sorted(_RAW))
def test_every_carried_dtype_round_trips(name, plain_write, tmp_path, monkeypatch):
    if not hasattr(torch, name):
        pytest.skip(f"torch {torch.__version__} has no {name}")
    t = _sample(name)
    if plain_write:  # the path taken when torch.from_file cannot map the file
        def no_map(*a, **k):
            raise RuntimeError("no mapping")
        monkeypatch.setattr(torch, "from_file", no_map)
    for i, src in enumerate((t, t[:, ::2].transpose(0, 2))):  # contiguous and a strided view
        meta = write_leaf(torch, src, str(tmp_path / f"{i}.bin"))
        assert meta["kind"] == "tensor" and meta["dtype"] == name
        monkeypatch.undo()
        for mapped in (False, True):
            got = read_leaf(meta, mapped=mapped)
            assert type(got) is torch.Tensor and got.dtype == src.dtype and got.shape == src.shape
            assert torch.equal(_bits(got), _bits(src))
        if plain_write:
            monkeypatch.setattr(torch, "from_file", no_map)


def test_conjugate_views_cross_as_values(tmp_path):
    z = torch.randn(4, 9, dtype=torch.complex64, generator=_gen())
    got = read_leaf(write_leaf(torch, z.conj(), str(tmp_path / "c.bin")))
    assert torch.equal(torch.view_as_real(got), torch.view_as_real(z.conj().resolve_conj()))


@pytest.mark.parametrize("make,why", [
    (lambda: torch.randn(3, 4).to_sparse(), "layout"),
    (lambda: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8), "quantized"),
    (lambda: torch.empty(3, device="meta"), "meta"),
])
def test_uncarried_tensors_cross_as_unsupported(make, why, tmp_path):
    meta = write_leaf(torch, make(), str(tmp_path / "u.bin"))
    assert meta["kind"] == "unsupported" and why in meta["why"]
    c = compare([torch.randn(3, 4)], [read_leaf(meta)], ATOL, RTOL)
    assert not c.ok and c.error_kind == "unsupported_output"


def test_read_leaf_refuses_a_dtype_it_does_not_carry(tmp_path):
    for dtype in ("load", ["float32"], "qint8"):
        got = read_leaf({"kind": "tensor", "dtype": dtype, "shape": [2], "path": str(tmp_path / "x.bin")})
        assert isinstance(got, dict) and got["kind"] == "unsupported"


# --------------------------------------------------------------------------- static rejections
_BASE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl
{snippet}

@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        k[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
'''


def _hard(snippet: str, policy: bool = True) -> list[str]:
    rep = static.check(_BASE.format(snippet=snippet), policy=policy)
    assert rep.ok, rep.error_msg
    return [f for f in rep.flags if f in static.HARD_STATIC_FLAGS]


@pytest.mark.parametrize("snippet", [
    "import davinci_kernel",
    "import davinci_kernel.evaluate.worker as w",
    "from davinci_kernel.evaluate import worker",
    "from davinci_kernel import evaluate as e",
    "import importlib\nm = importlib.import_module('davinci_kernel.evaluate.worker')",
    "m = __import__('davinci_kernel.evaluate')",
    "import builtins\nm = builtins.__import__('davinci_kernel')",
], ids=["import", "import-as", "from", "from-as", "import_module", "__import__", "builtins.__import__"])
def test_harness_import_is_rejected(snippet):
    assert "forbidden_import" in _hard(snippet)


@pytest.mark.parametrize("snippet", [
    "import torch._C",
    "from torch._C import _get_tracing_state",
    "from torch import _C",
    "f = torch._C._get_tracing_state",
    "import torch as t\nf = t._C._get_tracing_state",
    "f = getattr(torch, '_C')",
    "f = torch.cuda._C",
    "m = __import__('torch._C')",
], ids=["import", "from", "from-torch", "attribute", "alias", "getattr", "nested", "__import__"])
def test_torch_C_is_rejected(snippet):
    assert "forbidden_import" in _hard(snippet)


@pytest.mark.parametrize("snippet", [
    "from torch.utils._python_dispatch import TorchDispatchMode",
    "import torch.utils._python_dispatch",
    "from torch.utils import _python_dispatch",
    "M = torch.utils._python_dispatch.TorchDispatchMode",
    "from torch import utils\nM = utils._python_dispatch._disable_current_modes",
], ids=["from", "import", "from-utils", "attribute", "alias"])
def test_python_dispatch_is_rejected(snippet):
    assert "forbidden_import" in _hard(snippet)


@pytest.mark.parametrize("snippet", [
    "import ctypes",
    "from ctypes import c_void_p",
    "import ctypes.util",
    "import cffi",
    "import importlib\nc = importlib.import_module('ctypes')",
], ids=["import", "from", "submodule", "cffi", "import_module"])
def test_ctypes_and_cffi_are_rejected(snippet):
    assert "forbidden_import" in _hard(snippet)


@pytest.mark.parametrize("snippet", [
    "P = '/proc/self/mem'",
    "import os\nP = f'/proc/{os.getppid()}/mem'",
    "P = b'/proc/1/environ'",
    "P = '//proc/self/cmdline'",
    "P = '/proc'",
    "def f():\n    return open('/proc/self/maps').read()",
], ids=["str", "fstring", "bytes", "double-slash", "bare", "in-function"])
def test_proc_paths_are_rejected(snippet):
    assert "proc_access" in _hard(snippet)


@pytest.mark.parametrize("snippet", [
    "import torch.library",
    "from torch.library import custom_op",
    "from torch import library",
    "lib = torch.library.Library('aten', 'IMPL')",
    "@torch.library.custom_op('my::relu', mutates_args=())\ndef relu(x: torch.Tensor) -> torch.Tensor:\n    return x",
    "def f(x):\n    return x\ntorch.library.impl('aten::relu', 'CPU')(f)",
    "torch.library.register_kernel('my::relu', 'cpu')",
    "torch.library.define('my::relu(Tensor x) -> Tensor')",
    "lib = getattr(torch, 'library')",
    "torch.ops.load_library('/tmp/x.so')",
], ids=["import", "from", "from-torch", "Library", "custom_op", "impl", "register_kernel", "define", "getattr",
        "load_library"])
def test_torch_library_registration_is_rejected(snippet):
    assert "monkey_patch" in _hard(snippet)


@pytest.mark.parametrize("snippet", [
    "def f(x):\n    return x.untyped_storage()",
    "def f(x):\n    return x._typed_storage()",
    "def f(x):\n    return x.__dlpack__()",
    "import numpy as np\ndef f(x):\n    return np.from_dlpack(x)",
    "from torch.utils.dlpack import to_dlpack",
    "y = torch.from_dlpack",
    "def f(x):\n    return getattr(x, 'apply_')(abs)",
    "def f(x):\n    x.map_(x, lambda a, b: a)",
    "import numpy\np = numpy.ctypeslib.as_array",
    "from numpy.ctypeslib import as_array",
], ids=["untyped_storage", "typed_storage", "__dlpack__", "np.from_dlpack", "to_dlpack", "torch.from_dlpack",
        "getattr-apply_", "map_", "numpy.ctypeslib", "from-ctypeslib"])
def test_handing_a_tensors_memory_to_host_code_is_rejected(snippet):
    assert "forbidden_import" in _hard(snippet)


@pytest.mark.parametrize("snippet", [
    "import os\nf = os.fork",
    "from os import fork",
    "from os import posix_spawn as go",
    "import os as o\nrun = o.execv",
    "import os\nf = getattr(os, 'fork')",
    "import os\ndef f():\n    os.system('true')",
    "import pty\nspawn = pty.spawn",
], ids=["alias", "from", "from-as", "module-alias", "getattr", "call", "pty"])
def test_naming_a_process_starting_function_is_rejected(snippet):
    assert "subprocess" in _hard(snippet)


def test_names_near_the_rejected_ones_pass():
    snippet = (
        "import os\n"
        "P = os.path.join(os.getcwd(), 'x')\n"
        "E = os.environ.get('HOME')\n"
        "def f(x, y):\n"
        "    return x.storage_offset() + x.data_ptr() + y.apply(1)\n")
    assert _hard(snippet, policy=False) == []  # the denylist layer; the code policy refuses os.getcwd


def test_torch_library_in_a_cuda_source_is_rejected():
    src = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = """
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, int n) {}
at::Tensor fake_relu(const at::Tensor& x) { return at::zeros_like(x); }
TORCH_LIBRARY_IMPL(aten, CUDA, m) { m.impl("relu", fake_relu); }
"""
mod = load_inline(name="r", cpp_sources="", cuda_sources=cuda_src, functions=[])


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''
    rep = static.check(src)
    assert rep.backend == "cuda" and "monkey_patch" in rep.flags


def test_comments_and_strings_do_not_trigger():
    snippet = '''
# import ctypes; import davinci_kernel; torch._C; torch.library.Library; /proc/self/mem
NOTE = "uses ctypes, torch._C, torch.utils._python_dispatch and davinci_kernel only in prose"
DOC = """Reads nothing from /proc/self/maps; TORCH_LIBRARY is a C++ macro."""
PATH = "/tmp/procedure"
arr = torch.zeros(3).numpy()
name = "torch.library"
'''
    assert _hard(snippet, policy=False) == []  # the denylist layer; the code policy refuses .numpy()


def test_load_inline_stays_allowed():
    src = (Path(__file__).parent / "fixtures" / "legit" / "relu_cuda.py").read_text()
    rep = static.check(src)
    assert rep.backend == "cuda" and not [f for f in rep.flags if f in static.HARD_STATIC_FLAGS]


_LEGIT = sorted(glob.glob(str(Path(__file__).parent / "fixtures" / "legit" / "*.py"))
                + glob.glob(str(Path(__file__).parents[1] / "davinci_kernel" / "tasks" / "reference" / "**" / "*.py"),
                            recursive=True))


@pytest.mark.parametrize("path", _LEGIT, ids=lambda p: "/".join(Path(p).parts[-2:]))
def test_legit_sources_pass_the_static_check(path):
    rep = static.check(Path(path).read_text())
    assert not [f for f in rep.flags if f in static.HARD_STATIC_FLAGS], rep.notes


def test_new_flags_are_named():
    for name in ("forbidden_import", "proc_access"):
        assert name in FLAGS and name in static.HARD_STATIC_FLAGS


# --------------------------------------------------------------------------- through the evaluator
def test_honest_half_softmax_passes_where_zeros_fail(cpu_evaluator):
    """The same wide float16 softmax task: an honest kernel passes the per-dtype relative
    check (trials and the perturbed-size re-check); the zeros fixture fails it."""
    from conftest import FIXTURES, fixture_task

    task = fixture_task("softmax_half")
    res = cpu_evaluator.evaluate(task, (FIXTURES / "legit" / "softmax_half_triton.py").read_text())
    assert res.correct, (res.error_kind, res.error_msg, res.flags)
    assert res.rel_l2_error < 1e-3
    res = cpu_evaluator.evaluate(task, (FIXTURES / "cheats" / "softmax_zeros_half.py").read_text())
    assert not res.correct and res.error_kind == "wrong_output" and "signal" in res.error_msg


def test_descriptions_without_details_and_invalid_leaves_fail():
    c = compare([torch.randn(SHAPE)], [{"kind": "unsupported", "dtype": "float32"}], ATOL, RTOL)
    assert not c.ok and c.error_kind == "unsupported_output" and "does not carry" in c.message
    c = compare([torch.randn(SHAPE)], [{"kind": "invalid", "why": "an announced output file is missing"}], ATOL, RTOL)
    assert not c.ok and c.error_kind == "unsupported_output" and "missing" in c.message
