"""The code policy (evaluate/policy.py): unit tests of its rules over small snippets, allowed
and refused, and every honest source the project ships (references, seed-skill examples,
learning variants, legit fixtures) measured against it. KernelBench's example solutions are
checked when a checkout is given in ``DVK_KERNELBENCH``; docs/policy.md's generated part must
equal ``policy.render_markdown()``."""

from __future__ import annotations

import ast
import glob
import json
import os
from pathlib import Path

import pytest

from davinci_kernel.evaluate.harness.codepolicy import static
from davinci_kernel.evaluate.harness.codepolicy.policy import check_policy, render_markdown
from davinci_kernel.skills.markdown import example_blocks, read_skill_file

ROOT = Path(__file__).resolve().parents[1]
HEAD = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"


def rules(snippet: str) -> list[str]:
    return [v.rule for v in check_policy(ast.parse(HEAD + snippet))]


@pytest.mark.parametrize("snippet", [
    "import torch.nn.functional as F\ny = F.relu",
    "from torch.utils.cpp_extension import load_inline",
    "from triton.language.extra import libdevice",
    "from triton.language.extra.cuda import libdevice as ld",
    "import math\nfrom typing import Optional\nfrom __future__ import annotations",
    "import os\np = os.path.join(os.environ.get('HOME', '.'), 'x')",
    "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self._w = 1\n"
    "    def forward(self, x):\n        return x * self._w",
    "from torch.autograd import Function\nclass F(Function):\n    pass\nclass G(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n        ctx.save_for_backward(x)\n"
    "        return x",
    "class A(nn.Module):\n    pass\nclass B(A):\n    pass",
    "d = getattr(torch, 'float16')\nok = hasattr(d, 'itemsize')",
    "grid = lambda meta: (triton.cdiv(10, meta['B']),)\nsq = [i * i for i in range(4)]",
    "def outer(x):\n    def inner(y):\n        return y + 1\n    return inner(x).item()",
    "@triton.jit\ndef h(x):\n    return tl.maximum(x, 0.0)\n@triton.jit\ndef k(p, n, B: tl.constexpr):\n"
    "    o = tl.arange(0, B)\n    x = tl.load(p + o, mask=o < n)\n    x = h(x).to(tl.float32)\n"
    "    for i in tl.static_range(2):\n        x = x + min(i, 1)\n    tl.store(p + o, (x * 2).to(tl.float16))",
    "if __name__ == '__main__':\n    print(torch.testing.assert_close)",
    "x = torch.backends.cuda.matmul.allow_tf32",
], ids=["functional", "load_inline", "libdevice", "libdevice-cuda", "math-typing", "os-path", "own-private",
        "autograd-Function", "own-base", "const-getattr", "lambda-comprehension", "nested", "jit-helpers",
        "main-block", "read-backends"])
def test_allowed(snippet):
    assert check_policy(ast.parse(HEAD + snippet)) == []


@pytest.mark.parametrize("snippet,rule", [
    ("import os\nos.write(3, b'x')", "os"),
    ("import os as o\nw = o.write", "os"),
    ("from os import write", "os"),
    ("import struct", "import"),
    ("import signal", "import"),
    ("import pickle", "import"),
    ("import numpy as np", "import"),
    ("from . import x", "import"),
    ("from torch import *", "import"),
    ("from torch.utils.cpp_extension import load", "import"),
    ("f = getattr(torch, 'com' + 'pile')", "reflection"),
    ("g = getattr", "reflection"),
    ("e = eval('1')", "reflection"),
    ("v = vars(torch)", "reflection"),
    ("T = type('T', (), {})", "reflection"),
    ("m = __import__('os')", "dunder"),
    ("b = __builtins__", "dunder"),
    ("on = torch.autograd._profiler_enabled()", "private"),
    ("from torch.autograd import _profiler_enabled", "import"),
    ("A = torch.autograd\nA._toggle_collection_dynamic(False, set())", "private"),
    ("from torch.autograd import profiler as P\nP.profile = None", "import"),
    ("A = torch.autograd\nA.profiler.profile = None", "torch"),
    ("def f(x):\n    return x.__class__", "dunder"),
    ("def f(g):\n    return g.gi_frame.f_globals", "frame"),
    ("def f(x):\n    return x.numpy()", "host"),
    ("def f(x):\n    return x.tolist()", "host"),
    ("c = torch.compile", "torch"),
    ("g = torch.cuda.CUDAGraph()", "torch"),
    ("from torch.cuda import graphs", "import"),
    ("torch.save({}, 'x')", "torch"),
    ("d = torch.utils.dlpack", "torch"),
    ("p = torch.ops.aten.relu", "torch"),
    ("import torch.nn.functional as F\nF.torch.compile(None)", "reexport"),
    ("s = torch.os.getpid()", "reexport"),
    ("t = triton.runtime.driver", "triton"),
    ("torch.relu = None", "monkey_patch"),
    ("nn.Module.forward = None", "monkey_patch"),
    ("B = torch.backends.cuda.matmul\nB.allow_tf32 = True", "monkey_patch"),
    ("setattr(torch, 'relu', None)", "monkey_patch"),
    ("m = torch", "module_value"),
    ("def f(m=torch.autograd):\n    return m", "module_value"),
    ("mods = [tl, nn]", "module_value"),
    ("class L(list):\n    pass", "class"),
    ("class T(torch.Tensor):\n    pass", "class"),
    ("class M(nn.Module, metaclass=type):\n    pass", "class"),
    ("class K:\n    def __iter__(self):\n        return iter([])", "dunder"),
    ("class K:\n    __iter__ = None", "dunder"),
    ("def __getattr__(name):\n    return name", "dunder"),
    ("class K:\n    @property\n    def shape(self):\n        return 1", "class"),
    ("class K:\n    def sum(self):\n        return 1", "class"),
    ("def host(x):\n    return torch.relu(x)\n@triton.jit\ndef k(p):\n    host(p)", "jit"),
    ("@triton.jit\ndef k(p):\n    torch.relu(p)", "jit"),
    ("@triton.jit\ndef k(p):\n    f = lambda v: v\n    f(p)", "jit"),
    ("@triton.jit\ndef k(p):\n    p.compute()", "jit"),
    ("@triton.jit\ndef k(p):\n    tl.store(p, 0)\nk = None", "jit"),
    ("def max(a, b):\n    return a\n@triton.jit\ndef k(p):\n    tl.store(p, max(tl.load(p), 0.0))", "jit"),
    ("@triton.jit\ndef k(p, max):\n    tl.store(p, max(tl.load(p), 0.0))", "jit"),
    ("@triton.jit\ndef k(p, F):\n    tl.store(p, max(tl.load(p), 0.0, key=F))", "jit"),
    ("@triton.jit\ndef k(p, out):\n    print(tl.load(p), file=out)", "jit"),
    ("@triton.jit\ndef h(x):\n    return x\ndef h(x):\n    return x\n@triton.jit\ndef k(p):\n"
     "    tl.store(p, h(tl.load(p)))", "jit"),
    ("@triton.jit\ndef h(x):\n    return x\n@triton.jit\ndef k(p, h):\n    tl.store(p, h(tl.load(p)))", "jit"),
    ("class Box:\n    pass\nBOX = Box()\n@triton.jit\ndef k(p):\n    tl.store(p, BOX.sum(tl.load(p)))", "jit"),
    ("def host(v):\n    return 0\n@triton.jit\ndef k(p):\n    order = [2, 1]\n    order.sort(key=host)", "jit"),
    ("@triton.jit\ndef k(p, F):\n    order = [2, 1]\n    order.sort(key=F)", "jit"),
    ("def host(v):\n    return v.handle.data", "host"),
    # the second red-team round: shadowed builtins, nested imports, global module hooks, typing's eval
    ("from math import exec\nexec('1')", "shadow"),
    ("import math as __import__", "shadow"),
    ("def getattr(o, n):\n    return o", "shadow"),
    ("def f():\n    import math\n    return math.pi", "import"),
    ("import torch\ntorch.nn.modules.module.register_module_forward_hook(print)", "torch"),
    ("import typing\ntyping.get_type_hints(print)", "import"),
    ("import torch\ntorch.nested.nested_tensor([])", "torch"),
    ("@triton.jit\ndef k(p, H):\n    v = tl.load(p)\n    tl.reduce(v, 0, H)", "jit"),
], ids=lambda x: x if isinstance(x, str) and " " not in x and len(x) < 20 else None)
def test_refused(snippet, rule):
    got = rules(snippet)
    assert rule in got, got


K = "@triton.jit\ndef k(addr, p, v):\n"
LAUNCH = "\nk[(1,)](0, 0, 0)\n"


@pytest.mark.parametrize("snippet", [
    K + "    x = tl.load(p)\n    tl.store(p, (x * 2).to(p.dtype.element_ty))" + LAUNCH,
    K + "    tl.static_assert(p.type == p.type)\n    n = 4 * p.type.element_ty.itemsize\n    tl.store(p, v + n)" + LAUNCH,
    "@triton.jit\ndef gelu(x):\n    return (x * tl.sigmoid(1.702 * x)).to(x.dtype)\n" + K +
    "    tl.store(p, gelu(tl.load(p)))" + LAUNCH,
    "@triton.jit\ndef k(p, n: int, m: tl.int32, s: 'i32', B: tl.constexpr, C: 'tl.constexpr'):\n    tl.store(p, n)",
    K + "    y = tl.inline_asm_elementwise('tanh.approx.f32 $0, $1;', '=r,r', [tl.load(p)], dtype=tl.float32, "
    "is_pure=True, pack=1)\n    tl.store(p, y)" + LAUNCH,
    K + "    tl.store(p, v)\nk2 = triton.autotune(configs=[], key=['v'])(k)",
], ids=["element_ty", "type-compared", "helper-value-dtype", "annotations", "asm-math", "autotune-wraps"])
def test_pointer_idioms_allowed(snippet):
    assert check_policy(ast.parse(HEAD + snippet)) == []


# Every route from an integer to a pointer (pointer_policy.py); each was open before it.
@pytest.mark.parametrize("snippet", [
    K + "    tl.store(addr.to(tl.pi32_t), v)" + LAUNCH,
    K + "    t = p.dtype\n    tl.store(addr.to(t), v)" + LAUNCH,
    K + "    q = p + 0\n    tl.store(addr.to(q.dtype), v)" + LAUNCH,
    K + "    tl.store(addr.to(p.type.scalar), v)" + LAUNCH,
    K + "    q = p + tl.arange(0, 1)\n    tl.store((addr + tl.zeros((1,), tl.int64)).to(q.type.element_ty), v)" + LAUNCH,
    "@triton.jit\ndef h(a, t):\n    return a.to(t)\n" + K + "    tl.store(h(addr, p.dtype), v)" + LAUNCH,
    "@triton.jit\ndef h(q):\n    return q.dtype\n" + K + "    tl.store(addr.to(h(p)), v)" + LAUNCH,
    K + "    tl.store(tl.core.cast(addr, p.dtype, bitcast=True), v)" + LAUNCH,
    K + "    t = p.dtype\n    tl.store(tl.cast(addr, t, bitcast=True), v)" + LAUNCH,
    K + "    z = tl.zeros((1,), p.dtype)\n    tl.store(z + addr, v)" + LAUNCH,
    "@triton.jit\ndef k(addr: '*fp32', v):\n    tl.store(addr, v)",
    "PTR = '*fp64'\n@triton.jit\ndef k(addr: PTR, v):\n    tl.store(addr, v)",
    "int = '*fp32'\n@triton.jit\ndef k(addr: int, v):\n    tl.store(addr, v)",
    "def f(addr, p, v):\n    tl.store(addr.to(p.dtype), v)\nk = triton.jit(f)",
    "class A:\n    def data_ptr(self):\n        return 1",
    "class A:\n    def __init__(self, a):\n        self.data_ptr = lambda: a",
    K + "    tl.inline_asm_elementwise('st.global.f32 [$1], $2;', '=r,l,f', [addr, v], dtype=tl.int32, "
    "is_pure=False, pack=1)" + LAUNCH,
    "ASM = 'ld.global.f32 $0, [$1];'\n" + K + "    tl.store(p, tl.inline_asm_elementwise(ASM, '=r,l', [addr], "
    "dtype=tl.float32, is_pure=True, pack=1))" + LAUNCH,
], ids=["pi32_t", "dtype-local", "dtype-derived", "type-scalar", "block-element_ty", "helper-param", "helper-returns",
        "core-cast", "cast-local", "zeros-dtype", "annotation", "annotation-alias", "annotation-rebound-int",
        "jit-call", "data_ptr-method", "data_ptr-attr", "asm-store", "asm-named"])
def test_pointer_routes_refused(snippet):
    got = rules(snippet)
    assert "pointer" in got or "host" in got, got


def test_a_violation_names_its_line_and_rule():
    rep = static.check(HEAD + "import os\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
                       "        os.write(1, b'x')\n        return x\n")
    assert "policy_violation" in rep.flags and "policy_violation" in static.HARD_STATIC_FLAGS
    assert "line 10: 'os.write' is not allowed" in rep.notes[-1]
    assert "policy_violation" not in static.check(HEAD + "import os\nclass ModelNew(nn.Module):\n    def f(self):\n"
                                                  "        os.write(1, b'x')\n", policy=False).flags


def test_the_flag_is_named():
    from davinci_kernel.config import EvalConfig, choices_of
    from davinci_kernel.evaluate.harness.guards import FLAGS

    assert "policy_violation" in FLAGS
    assert EvalConfig().code_policy == "allowlist" and choices_of(EvalConfig, "code_policy") == ("allowlist", "off")


# --------------------------------------------------------------------------- honest sources
def _honest() -> dict[str, str]:
    out = {}
    for pattern in ("davinci_kernel/tasks/reference/**/*.py", "bench/learning/variants/**/*.py",
                    "tests/fixtures/legit/*.py"):
        out.update({str(Path(p).relative_to(ROOT)): Path(p).read_text()
                    for p in glob.glob(str(ROOT / pattern), recursive=True)})
    for p in sorted((ROOT / "davinci_kernel/skills/seed").glob("*.md")):
        skill, _ = read_skill_file(p)
        out[f"seed:{p.stem}"] = "\n\n".join(c for lang, c in example_blocks(skill.content) if lang in ("python", "py"))
    for line in (ROOT / "davinci_kernel/skills/seed/seed_skills.jsonl").read_text().splitlines():
        d = json.loads(line)
        out[f"jsonl:{d['name']}"] = "\n\n".join(c for lang, c in example_blocks(d["content"]) if lang in ("python", "py"))
    return out


HONEST = _honest()


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_sources_pass_the_policy(name):
    assert HONEST[name].strip(), name
    assert [str(v) for v in check_policy(ast.parse(HONEST[name]))] == []


def test_every_kind_of_honest_source_is_measured():
    kinds = {n.split(":")[0] if ":" in n else n.split("/")[0] + "/" + n.split("/")[1] for n in HONEST}
    assert {"seed", "jsonl", "davinci_kernel/tasks", "bench/learning", "tests/fixtures"} <= kinds


KB = os.environ.get("DVK_KERNELBENCH")
# KernelBench's example solutions in the backends this harness runs (CUDA through load_inline,
# Triton); templates with placeholders do not parse and are not solutions.
# ThunderKittens is a header library outside the policy's header list (its headers come through
# extra_include_paths, which no check reads): it is refused as another toolchain.
KB_OTHER_BACKENDS = {"model_new_ex_add_cute.py": "import", "model_new_ex_add_tilelang.py": "import",
                     "model_new_ex_add_hip.py": "os", "model_new_ex_add_thunderkittens.py": "native"}


@pytest.mark.skipif(not KB, reason="set DVK_KERNELBENCH to a KernelBench checkout")
def test_kernelbench_example_solutions_pass_the_policy():
    paths = sorted(Path(KB).rglob("model_new_ex_*.py"))
    assert paths, f"no model_new_ex_*.py under {KB}"
    passed = []
    for p in paths:
        try:
            tree = ast.parse(p.read_text())
        except SyntaxError:
            continue  # a template with placeholders
        if not tree.body:
            continue  # an empty file
        found = check_policy(tree)
        if p.name in KB_OTHER_BACKENDS:
            assert KB_OTHER_BACKENDS[p.name] in {v.rule for v in found}, p
        else:
            assert [str(v) for v in found] == [], p
            passed.append(p.name)
    assert len(passed) == 8, passed


def test_docs_page_lists_the_tables():
    page = (ROOT / "docs" / "policy.md").read_text()
    begin, end = "<!-- generated by policy.render_markdown(): begin -->\n", "<!-- generated: end -->"
    assert page.split(begin, 1)[1].split(end, 1)[0] == render_markdown()
