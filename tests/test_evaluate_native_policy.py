"""The code policy's native part (harness/codepolicy/native_policy.py): what ``load_inline`` sources,
flags and calls may hold. Honest CUDA idioms pass; each family of refused names, every way
of building a name the scan would not read, and every way of hiding a source from the check
is refused. The ``native_*`` cheating fixtures are judged end to end in test_evaluate_cheats.py."""

from __future__ import annotations

import ast

import pytest
from conftest import FIXTURES

from davinci_kernel.evaluate.harness.codepolicy.native_policy import check_text, flag_allowed
from davinci_kernel.evaluate.harness.codepolicy.policy import check_policy
from davinci_kernel.evaluate.harness.codepolicy.static import check

HONEST_SNIPPETS = {
    "shared memory": "extern __shared__ float smem[];\n__global__ void k(float* y) { smem[threadIdx.x] = 0; }",
    "pybind module": "#include <torch/extension.h>\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
                     "  m.def(\"f\", &f, \"doc\", py::arg(\"x\"));\n}",
    "namespace alias": "namespace py = pybind11;\nvoid g() {}",
    "std algorithms": "#include <algorithm>\n#include <vector>\nvoid g(std::vector<int>& v) {"
                      " v.erase(std::remove(v.begin(), v.end(), 0), v.end()); }",
    "cublas handle": "#include <cublas_v2.h>\nvoid g() { cublasHandle_t handle; cublasCreate(&handle); }",
    "variable named like a word": "__global__ void k(float* y) { int thread = threadIdx.x; float alias_free = "
                                  "y[thread]; y[thread] = alias_free; }",
    "digit separators": "__global__ void k(float* y) { long n = 1'000'000; y[0] = n > 0x1'0 ? 1.5e+3f : 0; }",
    "prefixed raw string": 'void g() { const char* s = u8R"x(a "quoted" PyRun)x"; (void)s; }',
    "std function named like a call": "#include <algorithm>\nvoid g(int* a, int n) { std::remove(a, a + n, 0); }",
    "stringizing macro": "#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x \" must be a CUDA tensor\")\n"
                         "void g(torch::Tensor x) { CHECK_CUDA(x); }",
    "pragma and guards": "#pragma once\n#ifndef BLOCK\n#define BLOCK 256\n#endif\n"
                         "__global__ void k(float* y) {\n#pragma unroll\n  for (int i = 0; i < 4; i++) y[i] = 0; }",
    "refused names in comments and strings": "// PyRun_SimpleString dlsym asm\n/* system(\"x\") */\n"
                                             "void g() { const char* s = \"PyRun_SimpleString fork()\"; (void)s; }",
    "raw string literal": 'void g() { const char* s = R"x(dlopen("a") )x"; (void)s; }',
    "member named like a call": "template <class R> int g(R& r, R* p) { return r.read() + p->write(); }",
    "cuda streams and syncs": "#include <ATen/cuda/CUDAContext.h>\nvoid g() { auto s = "
                              "at::cuda::getCurrentCUDAStream(); cudaStreamSynchronize(s); }",
}

REFUSED_SNIPPETS = {
    "python c api": 'void g() { PyRun_SimpleString("import os"); }',
    "python object": "void g(PyObject* o) { }",
    "pybind import": 'void g() { auto os = py::module_::import("os"); }',
    "pybind eval": 'void g() { py::eval("1"); }',
    "pybind attr": 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.attr("x"); }',
    "token pasting": "#define CAT(a, b) a##b\nvoid g() { CAT(Py, Run_SimpleString)(\"x\"); }",
    "digraph pasting": "%:define CAT(a, b) a%:%:b\nvoid g() {}",
    "line splice": 'void g() { PyRun_Simple\\\nString("x"); }',
    "line splice with blanks": 'void g() { P\\   \nyRun_SimpleString("x"); }',
    "line splice with a tab and CRLF": 'void g() { dl\\\t\r\nsym(0, 0); }',
    "dynamic loader": 'void g() { void* h = dlopen("libc.so.6", 2); (void)h; }',
    "extern declaration": 'extern "C" int getpid();\nvoid g() { getpid(); }',
    "inline assembly": 'void g() { asm volatile("nop"); }',
    "gnu assembly": 'void g() { __asm__("nop"); }',
    "syscall": "void g() { syscall(39); }",
    "system": 'void g() { system("ls"); }',
    "open call": 'void g() { int fd = open("/tmp/x", 0); (void)fd; }',
    "write call": 'void g() { write(3, "x", 1); }',
    "file stream": '#include <cstdio>\nvoid g() { FILE* f = fopen("/tmp/x", "w"); (void)f; }',
    "environment": 'void g() { const char* e = getenv("HOME"); (void)e; }',
    "threads": "#include <vector>\nvoid g() { std::thread t([]{}); t.join(); }",
    "posix threads": "void g() { pthread_create(0, 0, 0, 0); }",
    "signals": "void g() { raise(19); }",
    "record function": "void g() { at::enableRecordFunction(false); }",
    "profiler": "void g() { torch::autograd::profiler::disableProfiler(); }",
    "cupti": "void g() { cuptiActivityDisable(1); }",
    "callbacks": "void g() { at::clearCallbacks(); }",
    "host function on a stream": "void g() { cudaLaunchHostFunc(0, 0, 0); }",
    "cuda events": "void g() { cudaEvent_t e; cudaEventCreate(&e); }",
    "managed memory": "void g() { float* p; cudaMallocManaged(&p, 4); }",
    "mapped host memory": "void g() { float* p; cudaHostAlloc(&p, 4, 0); }",
    "driver modules": 'void g() { CUmodule m; cuModuleLoadData(&m, "x"); }',
    "global torch state": "void g() { at::globalContext().setAllowTF32CuBLAS(true); }",
    "dispatcher": "TORCH_LIBRARY(myops, m) { }",
    "load-time hook": "__attribute__((constructor)) static void early() {}",
    "device reset": "void g() { cudaDeviceReset(); }",
    "unlisted header": '#include "kittens.cuh"\nvoid g() {}',
    "system header": "#include <dlfcn.h>\nvoid g() {}",
    "line directive": "#line 1 \"x\"\nvoid g() {}",
    "trigraph": "??=define X 1\nvoid g() {}",
    "name hidden by a digit separator": "void g() { int a = 1'0; PyRun_SimpleString(\"x\"); int b = 1'0; }",
    "name hidden by a prefixed raw string": 'void g() { auto s = u8R"x(a"b)x"; dlopen(0, 2); auto t = ""; }',
    "universal character name": "void g() { dl\\u0073ym(0, 0); }",
    "global qualified call": "void g() { ::write(3, \"x\", 1); }",
    "function address": "void g() { auto f = &write; f(3, \"x\", 1); }",
    "function decayed to a pointer": "void g() { auto f = write; f(3, \"x\", 1); }",
    "using declaration": "using ::write;\nvoid g() {}",
    "file descriptors of others": "void g() { pidfd_getfd(0, 3, 0); }",
    "frame walking": "void g() { void* f = __builtin_frame_address(0); (void)f; }",
}


@pytest.mark.parametrize("name", sorted(HONEST_SNIPPETS))
def test_honest_native_idioms_pass(name):
    assert check_text(HONEST_SNIPPETS[name]) == []


@pytest.mark.parametrize("name", sorted(REFUSED_SNIPPETS))
def test_refused_native_code(name):
    found = check_text(REFUSED_SNIPPETS[name])
    assert found, name
    assert all(isinstance(m, str) and m for m in found)


@pytest.mark.parametrize("flag,ok", [
    ("-O3", True), ("", True), ("--use_fast_math", True), ("-std=c++17", True), ("-DNDEBUG", True),
    ("-DBLOCK=256", True), ("-arch=sm_90a", True), ("-gencode=arch=compute_90a,code=sm_90a", True),
    ("-Xcompiler -fPIC", True), ("--ptxas-options=-v", True), ("-lineinfo", True),
    ("-DRUN=PyRun_SimpleString", False), ("-include/etc/passwd", False), ("-I/tmp", False),
    ("-Xcompiler=-include/tmp/x.h", False), ("-Wl,--wrap=open", False), ("-fplugin=/tmp/p.so", False),
])
def test_compiler_flags(flag, ok):
    assert flag_allowed(flag) is ok


def _src(call: str, prelude: str = "") -> str:
    return ("import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
            f"{prelude}\n_m = {call}\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
            "        return _m.f(x)\n")


def _native_violations(source: str) -> list[str]:
    return [v.message for v in check_policy(ast.parse(source)) if v.rule == "native"]


@pytest.mark.parametrize("prelude,call", [
    ('S = "torch::Tensor f(torch::Tensor x);"', 'load_inline("m", S, functions=["f"])'),
    ('A = "torch::Tensor f("\nB = A + "torch::Tensor x);"', 'load_inline(name="m", cpp_sources=[B], functions=["f"])'),
    ("N = 256", 'load_inline(name="m", cpp_sources=f"#define BLOCK {N}\\ntorch::Tensor f(torch::Tensor x);")'),
    ("", 'load_inline(name="m", cpp_sources="", functions={"f": "the op, fused", "g": "doc"})'),
    ("", 'load_inline(name="m", cpp_sources="", cuda_sources=("__global__ void k() {}" "\\n"), '
         'extra_cuda_cflags=["-O3", "--use_fast_math"], extra_ldflags=["-lcublas"], verbose=False)'),
])
def test_statically_known_sources_pass(prelude, call):
    assert _native_violations(_src(call, prelude)) == []


@pytest.mark.parametrize("prelude,call,why", [
    ('T = "os"', 'load_inline(name="m", cpp_sources=f"{T}")', "known before the run"),
    ('S = "a"\nS = "PyRun_SimpleString"', 'load_inline(name="m", cpp_sources=S)', "known before the run"),
    ("", 'load_inline(name="m", cpp_sources="".join(["Py", "Run"]))', "known before the run"),
    ('K = {"name": "m"}', "load_inline(**K)", "no *args"),
    ('A = ["m", ""]', "load_inline(*A)", "no *args"),
    ("", 'load_inline("m", "", "", ["f"])', "first 3 arguments"),
    ("build = load_inline", 'build(name="m", cpp_sources="")', "called directly"),
    ("", 'load_inline(name="m", cpp_sources="", extra_include_paths=["/tmp"])', "extra_include_paths"),
    ("", 'load_inline(name="m", cpp_sources="", build_directory="/tmp/b")', "build_directory"),
    ("", 'load_inline(name="m", cpp_sources="", is_python_module=False)', "is_python_module"),
    ("", 'load_inline(name="m", cpp_sources="", extra_ldflags=["-ldl"])', "extra_ldflags"),
    ("F = ['-O3']\nF.append('-DX=Py')", 'load_inline(name="m", cpp_sources="", extra_cflags=F)', "literal list"),
    ("", 'load_inline(name="m", cpp_sources="PyRun_SimpleString(0);")', "Python C API"),
    ("", 'load_inline(name="m", cpp_sources="", functions={"f": \'x"); m.def("r", [](){ return 1; }, "\'})',
     "functions must be identifiers"),
    ("", 'load_inline(name="m", cpp_sources="", functions=["f(){}; void g"])', "functions must be identifiers"),
    ("F = [\"f\"]\nF.append(\"g\")", 'load_inline(name="m", cpp_sources="", functions=F)', "functions must be"),
    ("", 'load_inline(name="m -DX=1", cpp_sources="")', "name must be an identifier"),
    ("N = \"m\" + chr(59)", 'load_inline(name=N, cpp_sources="")', "name must be an identifier"),
])
def test_unknown_or_refused_load_inline_use(prelude, call, why):
    found = _native_violations(_src(call, prelude))
    assert any(why in m for m in found), found


def test_load_inline_reached_through_the_module_is_checked():
    src = _src('torch.utils.cpp_extension.load_inline(name="m", cpp_sources="asm(\\"nop\\");")')
    assert any("'asm'" in m for m in _native_violations(src))


@pytest.mark.parametrize("path", sorted((FIXTURES / "cheats").glob("native_*.py")), ids=lambda p: p.stem)
def test_native_cheats_are_refused_before_they_run(path):
    rep = check(path.read_text())
    assert "policy_violation" in rep.flags, rep.notes


@pytest.mark.parametrize("path", sorted((FIXTURES / "legit").glob("*cuda*.py")), ids=lambda p: p.stem)
def test_legit_cuda_fixtures_pass(path):
    assert _native_violations(path.read_text()) == []


def test_a_cpu_worker_builds_no_native_code_under_any_name():
    """In a CPU worker torch's C++ builders raise before a candidate is imported, whatever
    name the candidate imports them by (run in a fresh process: it changes torch's module)."""
    import subprocess
    import sys

    code = ("from davinci_kernel.evaluate.shared import runtime as rt\n"
            "rt.no_native_builds()\n"
            "from torch.utils.cpp_extension import load_inline as build\n"
            "try:\n"
            "    build(name='x', cpp_sources='int f(){return 1;}', functions=['f'])\n"
            "except RuntimeError as e:\n"
            "    print('REFUSED', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.startswith("REFUSED native code"), (r.stdout, r.stderr[-2000:])


def test_variant_spellings_of_refused_calls_are_refused():
    """The C library's large-file, internal and unlocked variants name the same calls."""
    from davinci_kernel.evaluate.harness.codepolicy.native_policy import check_text

    for name in ("fopen64", "_Fork", "__libc_fork", "fread_unlocked", "execveat", "open64", "pread64"):
        assert check_text(f"int f() {{ {name}(0); return 0; }}"), name
    for name in ("float4", "int64_t", "forward", "my_open64"):
        assert not check_text(f"int f() {{ {name} v; return 0; }}"), name
