"""Practice families: more practice pairs per technique, each a task and its (lacking, with)
kernels that differ from their siblings only in the epilogue the task's forward names.

Probe 1 found that "apply the skill" was learnt as recalling a practice kernel by the
task's text: each technique was taught on 2 or 3 practice pairs, so the data never showed
the epilogue of a kernel change with the forward it implements (docs/coevolution.md). A
family holds one skeleton per technique and several members; each member is a forward
(torch) and the same computation as Triton expressions, and ``render`` writes, per member:

- the task (KernelBench format, under ``bench/coevo/tasks``);
- its ``lacking_*`` kernel (the technique missing in one of two ways, alternating over the
  members: for the elementwise chain one narrow launch or two kernels; for the GEMM 16x16
  tiles with the epilogue in a second kernel, or 64x64 tiles with it fused; for the row
  reduction two passes or one kernel looping over chunks);
- its ``with_<technique>`` kernel;
- its manifest entries (``bench/coevo/variants/manifest.json``: the ``lacking``/``with``
  roles, from which ``protocol.resolve`` adds the practice pairs and tasks).

No member uses a held-out task's own epilogue (hardswish after a bias with a scale and a
residual; SiLU after a linear; sigmoid times a scale after an RMSNorm) nor an RL task's
(swish, scale, clamp, residual; GELU after a linear; SiLU-gated RMSNorm). Their single ops
(sigmoid, tanh, GELU, a bias, a residual) do appear in other combinations: a pretrained base
would know every one of them, and both arms of each comparison share the same data.

``python bench/coevo/family.py`` rewrites the files and the manifest's entries of the
members (``--check`` only compares); ``tests/test_coevo_tasks.py`` asserts the committed
files are what ``render`` gives. Does not cover: judging the kernels (the tests and
``prepare`` do) or the SFT rows (``sftdata.py``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

COEVO = Path(__file__).resolve().parent
TASKS, VARIANTS = COEVO / "tasks", COEVO / "variants"


@dataclass(frozen=True)
class Member:
    """One task of a family. ``torch``: the forward's return expression (or its body);
    ``act``/``rest``: the same computation as Triton expressions (``act`` the first value
    ``t``, ``rest`` the output from ``t``); ``title``: the math in words; ``ops``: eager's
    kernels; ``bias``: whether the task has a learned per-feature bias; ``lacking``: which
    of the two lacking forms it gets (0 or 1)."""

    level: int
    number: int
    name: str
    title: str
    torch: str
    act: str
    rest: str
    ops: str
    lacking: int
    bias: bool = False
    functional: bool = True
    cpu: tuple = ()

    @property
    def task(self) -> str:
        return f"level{self.level}/{self.number}_{self.name}"


# ----------------------------------------------------------------------------- members
ELEMENTWISE = [
    Member(1, 23, "Tanh_Scale_Residual", "tanh(x) * scale + x", "torch.tanh(x) * self.scale_factor + x",
           "2.0 * tl.sigmoid(2.0 * x) - 1.0", "t * scale + x", "three kernels (tanh, mul, add)", 1,
           functional=False, cpu=(6, 70)),
    Member(1, 24, "ReLU_Bias_Scale", "relu(x + bias) * scale", "F.relu(x + self.bias) * self.scale_factor",
           "tl.maximum(x + b, 0.0)", "t * scale", "three kernels (add, relu, mul)", 0, bias=True, cpu=(5, 66)),
    Member(1, 25, "Sigmoid_Bias_Scale_Residual", "sigmoid(x + bias) * scale + x",
           "torch.sigmoid(x + self.bias) * self.scale_factor + x", "tl.sigmoid(x + b)", "t * scale + x",
           "four kernels (add, sigmoid, mul, add)", 1, bias=True, functional=False, cpu=(7, 40)),
    Member(1, 26, "ELU_Scale_Residual", "elu(x) * scale + x", "F.elu(x) * self.scale_factor + x",
           "tl.where(x > 0, x, tl.exp(x) - 1.0)", "t * scale + x", "three kernels (elu, mul, add)", 0, cpu=(4, 88)),
    Member(1, 27, "GELU_Bias_Scale", "gelu(x + bias) * scale (erf form)", "F.gelu(x + self.bias) * self.scale_factor",
           "0.5 * (x + b) * (1.0 + tl.math.erf((x + b) * 0.7071067811865476))", "t * scale",
           "three kernels (add, gelu, mul)", 1, bias=True, cpu=(6, 52)),
    Member(1, 28, "Softplus_Bias_Residual", "softplus(x + bias) * scale + x",
           "F.softplus(x + self.bias) * self.scale_factor + x",
           "tl.where(x + b > 20.0, x + b, tl.log(1.0 + tl.exp(tl.minimum(x + b, 20.0))))", "t * scale + x",
           "four kernels (add, softplus, mul, add)", 0, bias=True, cpu=(5, 60)),
]

GEMM = [
    Member(2, 14, "Linear_Bias_ReLU", "relu(x @ W^T + b)", "F.relu(self.linear(x))", "tl.maximum(acc, 0.0)", "",
           "a GEMM with bias, then relu", 0, cpu=(24, 48, 40)),
    Member(2, 15, "Linear_Bias_Tanh", "tanh(x @ W^T + b)", "torch.tanh(self.linear(x))",
           "2.0 * tl.sigmoid(2.0 * acc) - 1.0", "", "a GEMM with bias, then tanh", 1, functional=False,
           cpu=(30, 36, 44)),
    Member(2, 16, "Linear_Bias_LeakyReLU", "leaky_relu(x @ W^T + b, 0.2)", "F.leaky_relu(self.linear(x), 0.2)",
           "tl.where(acc >= 0, acc, acc * 0.2)", "", "a GEMM with bias, then leaky_relu", 0, cpu=(18, 56, 28)),
    Member(2, 17, "Linear_Bias_ELU", "elu(x @ W^T + b)", "F.elu(self.linear(x))",
           "tl.where(acc > 0, acc, tl.exp(acc) - 1.0)", "", "a GEMM with bias, then elu", 1, cpu=(26, 40, 52)),
]

ROWS = [
    Member(2, 18, "RMSNorm_ReLU_Scale", "relu(rmsnorm(x) * weight) * scale", "F.relu(y) * self.scale",
           "tl.maximum(y, 0.0)", "t * scale", "six kernels (pow, mean, add + rsqrt, mul, mul, relu + mul)", 0,
           cpu=(7, 80)),
    Member(2, 19, "RMSNorm_Tanh_Scale", "tanh(rmsnorm(x) * weight) * scale", "torch.tanh(y) * self.scale",
           "2.0 * tl.sigmoid(2.0 * y) - 1.0", "t * scale", "six kernels (pow, mean, add + rsqrt, mul, tanh, mul)", 1,
           functional=False, cpu=(5, 96)),
    Member(2, 20, "RMSNorm_GELU_Scale", "gelu(rmsnorm(x) * weight) * scale (erf form)", "F.gelu(y) * self.scale",
           "0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))", "t * scale",
           "six kernels (pow, mean, add + rsqrt, mul, gelu, mul)", 0, cpu=(6, 64)),
    Member(2, 21, "RMSNorm_ELU_Scale", "elu(rmsnorm(x) * weight) * scale", "F.elu(y) * self.scale",
           "tl.where(y > 0, y, tl.exp(y) - 1.0)", "t * scale", "six kernels (pow, mean, add + rsqrt, mul, elu, mul)", 1,
           cpu=(8, 56)),
]

FAMILIES = {"fuse_elementwise_chain": ELEMENTWISE, "gemm_tile128_fused_epilogue": GEMM,
            "one_pass_row_reduction": ROWS}

IMPORTS = "import torch\nimport torch.nn as nn\n"
KERNEL_IMPORTS = IMPORTS + "import triton\nimport triton.language as tl\n"


def _imports(m: Member, kernel: bool) -> str:
    base = KERNEL_IMPORTS if kernel else IMPORTS
    if m.functional and not kernel:
        base = base.replace("import torch.nn as nn\n", "import torch.nn as nn\nimport torch.nn.functional as F\n")
    return base


def _snake(m: Member) -> str:
    return m.name.lower()


# ----------------------------------------------------------------------------- elementwise
def _ew_task(m: Member) -> str:
    init = "dim: int, scale_factor: float" if m.bias else "scale_factor: float"
    bias = "        self.bias = nn.Parameter(0.5 * torch.randn(dim))\n" if m.bias else ""
    args = "[dim, scale_factor]" if m.bias else "[scale_factor]"
    return f'''"""Elementwise chain: {m.title}, float32.

Practice task of the co-evolution v2 (technique fuse_elementwise_chain; SFT only): eager
runs {m.ops}.

op_type: fusion/elementwise
"""
{_imports(m, False)}
batch_size = 8192
dim = 4096
scale_factor = {1.5 + 0.25 * (m.number % 4)}

CPU_SHAPES = {{"batch_size": {m.cpu[0]}, "dim": {m.cpu[1]}}}
PERTURB = ["batch_size", "dim"]


class Model(nn.Module):
    def __init__(self, {init}):
        super().__init__()
{bias}        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return {m.torch}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return {args}
'''


def _ew_model(m: Member, body: str) -> str:
    init = "dim: int, scale_factor: float" if m.bias else "scale_factor: float"
    bias = "        self.bias = nn.Parameter(0.5 * torch.randn(dim))\n" if m.bias else ""
    return f'''class ModelNew(nn.Module):
    def __init__(self, {init}):
        super().__init__()
{bias}        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
{body}        return y
'''


def _ew_loads(m: Member) -> str:
    out = "    x = tl.load(x_ptr + offs, mask=mask, other=0.0)\n"
    if m.bias:
        out += "    b = tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0)\n"
    return out


_EW_HEAD = ("    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)\n"
            "    mask = offs < n_elements\n")


def _ew_one_kernel(m: Member, block: int, warps: int) -> str:
    name = f"{_snake(m)}_kernel"
    params = "x_ptr, b_ptr, y_ptr, n_elements, n_cols, scale" if m.bias else "x_ptr, y_ptr, n_elements, scale"
    args = "x, self.bias, y, n, x.shape[-1], self.scale_factor" if m.bias else "x, y, n, self.scale_factor"
    kernel = (f"@triton.jit\ndef {name}({params}, BLOCK: tl.constexpr):\n" + _EW_HEAD + _ew_loads(m)
              + f"    t = {m.act}\n    tl.store(y_ptr + offs, {m.rest}, mask=mask)\n")
    body = (f"        y = torch.empty_like(x)\n        n = x.numel()\n        grid = (triton.cdiv(n, {block}),)\n"
            f"        {name}[grid]({args}, BLOCK={block}, num_warps={warps})\n")
    return kernel + "\n\n" + _ew_model(m, body)


def _ew_two_kernels(m: Member) -> str:
    first, second = f"{_snake(m)}_act_kernel", f"{_snake(m)}_rest_kernel"
    p1 = "x_ptr, b_ptr, t_ptr, n_elements, n_cols" if m.bias else "x_ptr, t_ptr, n_elements"
    a1 = "x, self.bias, t, n, x.shape[-1]" if m.bias else "x, t, n"
    needs_b = "b" in m.rest.replace("t * scale", "")
    needs_x = "x" in m.rest
    p2 = "t_ptr, " + ("x_ptr, " if needs_x else "") + ("b_ptr, " if needs_b else "") + "y_ptr, n_elements"
    p2 += ", n_cols, scale" if needs_b else ", scale"
    a2 = "t, " + ("x, " if needs_x else "") + ("self.bias, " if needs_b else "") + "y, n"
    a2 += ", x.shape[-1], self.scale_factor" if needs_b else ", self.scale_factor"
    loads2 = "    t = tl.load(t_ptr + offs, mask=mask, other=0.0)\n"
    if needs_x:
        loads2 += "    x = tl.load(x_ptr + offs, mask=mask, other=0.0)\n"
    kernels = (f"@triton.jit\ndef {first}({p1}, BLOCK: tl.constexpr):\n" + _EW_HEAD + _ew_loads(m)
               + f"    tl.store(t_ptr + offs, {m.act}, mask=mask)\n\n\n"
               f"@triton.jit\ndef {second}({p2}, BLOCK: tl.constexpr):\n" + _EW_HEAD + loads2
               + f"    tl.store(y_ptr + offs, {m.rest}, mask=mask)\n")
    body = ("        t = torch.empty_like(x)\n        y = torch.empty_like(x)\n        n = x.numel()\n"
            "        grid = (triton.cdiv(n, 1024),)\n"
            f"        {first}[grid]({a1}, BLOCK=1024, num_warps=4)\n"
            f"        {second}[grid]({a2}, BLOCK=1024, num_warps=4)\n")
    return kernels + "\n\n" + _ew_model(m, body)


def _elementwise(m: Member) -> dict[str, tuple[str, str]]:
    """name -> (source, what) of the member's lacking and with kernels."""
    if m.lacking == 0:
        lname, lwhat = "lacking_block32", "the chain in one kernel, poor launch: 32 elements per 1-warp program"
        ldoc = (f'"""{m.title} in one kernel with a poor launch: 32 elements per 1-warp program.\n\n'
                "Practice pair, the kernel lacking fuse_elementwise_chain: the chain is in one kernel, but\n"
                "each 1-warp program moves only 128 bytes per load, too little in flight to approach the\n"
                'memory bandwidth; widening the launch to 1024-4096 elements and 4-8 warps is the fix.\n"""\n')
        lbody = _ew_one_kernel(m, 32, 1)
    else:
        lname = "lacking_two_kernels"
        lwhat = "the first op to a temporary, then the rest in a second kernel (1024 elements, 4 warps each)"
        ldoc = (f'"""{m.title} in two kernels: the first op to a temporary, then the rest reading it back.\n\n'
                "Practice pair, the kernel lacking fuse_elementwise_chain: the launches are wide (1024\n"
                "elements, 4 warps), but the chain is split, so the temporary is written and read back in\n"
                'two launches.\n"""\n')
        lbody = _ew_two_kernels(m)
    wdoc = (f'"""{m.title} in one elementwise kernel: 4096 elements per program, 8 warps.\n\n'
            "Practice pair, the kernel with fuse_elementwise_chain: each input element is read once and\n"
            "each output written once, in one wide launch, against eager's " + m.ops + '.\n"""\n')
    wbody = _ew_one_kernel(m, 4096, 8)
    return {lname: (ldoc + _imports(m, True) + "\n\n" + lbody, lwhat),
            "with_fuse_elementwise_chain": (wdoc + _imports(m, True) + "\n\n" + wbody,
                                            "the chain in one kernel, 4096 elements per program, 8 warps")}


# ----------------------------------------------------------------------------- GEMM
def _gemm_task(m: Member) -> str:
    b, i, o = m.cpu
    return f'''"""Linear layer with bias and an activation: {m.title}, float32.

Practice task of the co-evolution v2 (technique gemm_tile128_fused_epilogue; SFT only):
eager runs {m.ops}.

op_type: fusion/gemm_epilogue
"""
{_imports(m, False)}
batch_size = 4096
in_features = 4096
out_features = 4096

CPU_SHAPES = {{"batch_size": {b}, "in_features": {i}, "out_features": {o}}}
PERTURB = ["batch_size", "in_features", "out_features"]


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return {m.torch}


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''


_GEMM_LOOP = '''    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc = tl.dot(a, b, acc)
'''
_GEMM_STORE = "    tl.store(y_ptr + rm[:, None] * N + rn[None, :], {v}, mask=(rm[:, None] < M) & (rn[None, :] < N))\n"
_GEMM_MODEL = '''class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        w = self.linear.weight.contiguous()
        M, K = x2.shape
        N = w.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
{launch}        return y.reshape(*x.shape[:-1], N)
'''


def _gemm_fused(m: Member, tile: int, warps: int, stages: int) -> str:
    name = f"{_snake(m)}_kernel"
    kernel = (f"@triton.jit\ndef {name}(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,\n"
              f"{' ' * (len(name) + 5)}BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):\n"
              + _GEMM_LOOP + "    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]\n"
              f"    y = {m.act}\n" + _GEMM_STORE.format(v="y"))
    launch = (f"        grid = (triton.cdiv(M, {tile}), triton.cdiv(N, {tile}))\n"
              f"        {name}[grid](x2, w, self.linear.bias, y, M, N, K, BLOCK_M={tile}, BLOCK_N={tile}, BLOCK_K=32,\n"
              f"        {' ' * (len(name) + 7)}num_warps={warps}, num_stages={stages})\n")
    return kernel + "\n\n" + _GEMM_MODEL.format(launch=launch)


def _gemm_unfused16(m: Member) -> str:
    epi = f"{_snake(m)}_epilogue_kernel"
    kernels = ("@triton.jit\ndef matmul_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, "
               "BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):\n" + _GEMM_LOOP + _GEMM_STORE.format(v="acc")
               + f"\n\n@triton.jit\ndef {epi}(y_ptr, b_ptr, n_elements, N, BLOCK: tl.constexpr):\n"
               "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    mask = offs < n_elements\n"
               "    acc = tl.load(y_ptr + offs, mask=mask, other=0.0) + tl.load(b_ptr + offs % N, mask=mask, "
               "other=0.0)\n"
               f"    tl.store(y_ptr + offs, {m.act}, mask=mask)\n")
    launch = ("        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))\n"
              "        matmul_kernel[grid](x2, w, y, M, N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=1, "
              "num_stages=1)\n"
              f"        {epi}[(triton.cdiv(M * N, 32),)](y, self.linear.bias, M * N, N, BLOCK=32, num_warps=1)\n")
    return kernels + "\n\n" + _GEMM_MODEL.format(launch=launch)


def _gemm(m: Member) -> dict[str, tuple[str, str]]:
    if m.lacking == 0:
        lname = "lacking_tile16_unfused"
        lwhat = "a 16x16x16-tile 1-warp GEMM writes x @ W^T, then a 32-wide 1-warp kernel adds the bias and the activation"
        ldoc = (f'"""{m.title} unfused with tiny tiles: a 16x16x16-tile, 1-warp GEMM, then a 32-wide kernel for the '
                "bias and the activation.\n\nPractice pair, the kernel lacking gemm_tile128_fused_epilogue: each "
                "tile reloads its operands\nfor only 16x16 outputs, and the product makes a round trip through "
                'memory before\nthe epilogue kernel reads it back.\n"""\n')
        lbody = _gemm_unfused16(m)
    else:
        lname = "lacking_tile64_fused"
        lwhat = "the bias and the activation fused before the store, but 64x64x32 tiles and 4 warps"
        ldoc = (f'"""{m.title} as one Triton GEMM with the epilogue fused, but 64x64x32 tiles and 4 warps.\n\n'
                "Practice pair, the kernel lacking gemm_tile128_fused_epilogue: the epilogue is fused, but\n"
                "each 64x64 tile reads its operands for a quarter of the outputs a 128x128 tile gets from\n"
                'twice the loads: half the arithmetic intensity.\n"""\n')
        lbody = _gemm_fused(m, 64, 4, 2)
    wdoc = (f'"""{m.title} as one Triton GEMM: 128x128x32 tiles, the bias and the activation in the epilogue, '
            "8 warps.\n\nPractice pair, the kernel with gemm_tile128_fused_epilogue: the accumulator gets the bias "
            'and\nthe activation in registers before the one store of each output tile.\n"""\n')
    return {lname: (ldoc + _imports(m, True) + "\n\n" + lbody, lwhat),
            "with_gemm_tile128_fused_epilogue": (wdoc + _imports(m, True) + "\n\n" + _gemm_fused(m, 128, 8, 3),
                                                 "one GEMM with 128x128x32 tiles, bias and activation before the "
                                                 "store, 8 warps")}


# ----------------------------------------------------------------------------- rows
def _rows_task(m: Member) -> str:
    return f'''"""Row reduction then an epilogue: {m.title}, float32.

Practice task of the co-evolution v2 (technique one_pass_row_reduction; SFT only): eager
runs {m.ops}.

op_type: fusion/normalization
"""
{_imports(m, False)}
num_tokens = 16384
hidden_size = 4096
scale = {0.5 + 0.5 * (m.number % 4)}

CPU_SHAPES = {{"num_tokens": {m.cpu[0]}, "hidden_size": {m.cpu[1]}}}
PERTURB = ["num_tokens", "hidden_size"]


class Model(nn.Module):
    def __init__(self, hidden_size: int, scale: float, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size))
        self.scale = scale
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.pow(2).mean(dim=-1, keepdim=True)
        y = x * torch.rsqrt(var + self.eps) * self.weight
        return {m.torch}


def get_inputs():
    return [torch.randn(num_tokens, hidden_size)]


def get_init_inputs():
    return [hidden_size, scale]
'''


_ROWS_MODEL = '''class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, scale: float, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_size))
        self.scale = scale
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.empty_like(x2)
        n_rows, n_cols = x2.shape
{launch}        return y.view(x.shape)
'''


def _epilogue(m: Member, into: str = "y") -> str:
    return f"    t = {m.act}\n    tl.store({into}, {m.rest}, mask=mask)\n"


def _rows_one_pass(m: Member) -> str:
    name = f"{_snake(m)}_kernel"
    kernel = (f"@triton.jit\ndef {name}(x_ptr, w_ptr, y_ptr, n_cols, stride, eps, scale, BLOCK: tl.constexpr):\n"
              "    row = tl.program_id(0).to(tl.int64)\n    cols = tl.arange(0, BLOCK)\n    mask = cols < n_cols\n"
              "    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)\n"
              "    w = tl.load(w_ptr + cols, mask=mask, other=0.0)\n"
              "    rstd = tl.math.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)\n    y = x * rstd * w\n"
              + _epilogue(m, "y_ptr + row * stride + cols"))
    launch = ("        block = triton.next_power_of_2(n_cols)\n"
              f"        {name}[(n_rows,)](x2, self.weight, y, n_cols, x2.stride(0), self.eps, self.scale,\n"
              f"        {' ' * (len(name) + 10)}BLOCK=block, num_warps=8)\n")
    return kernel + "\n\n" + _ROWS_MODEL.format(launch=launch)


def _rows_two_pass(m: Member) -> str:
    name = f"{_snake(m)}_apply_kernel"
    kernels = ("@triton.jit\ndef row_rstd_kernel(x_ptr, r_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):\n"
               "    row = tl.program_id(0).to(tl.int64)\n    cols = tl.arange(0, BLOCK)\n"
               "    acc = tl.zeros((BLOCK,), tl.float32)\n    for c0 in range(0, n_cols, BLOCK):\n"
               "        x = tl.load(x_ptr + row * stride + c0 + cols, mask=c0 + cols < n_cols, other=0.0)\n"
               "        acc += x * x\n"
               "    tl.store(r_ptr + row, tl.math.rsqrt(tl.sum(acc, axis=0) / n_cols + eps))\n\n\n"
               f"@triton.jit\ndef {name}(x_ptr, w_ptr, y_ptr, r_ptr, n_cols, stride, scale, BLOCK: tl.constexpr):\n"
               "    row = tl.program_id(0).to(tl.int64)\n    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)\n"
               "    mask = cols < n_cols\n    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)\n"
               "    w = tl.load(w_ptr + cols, mask=mask, other=0.0)\n    y = x * tl.load(r_ptr + row) * w\n"
               + _epilogue(m, "y_ptr + row * stride + cols"))
    launch = ("        rstd = torch.empty(n_rows, device=x.device, dtype=torch.float32)\n"
              "        row_rstd_kernel[(n_rows,)](x2, rstd, n_cols, x2.stride(0), self.eps, BLOCK=1024, num_warps=4)\n"
              "        grid = (n_rows, triton.cdiv(n_cols, 1024))\n"
              f"        {name}[grid](x2, self.weight, y, rstd, n_cols, x2.stride(0), self.scale, BLOCK=1024,\n"
              f"        {' ' * (len(name) + 7)}num_warps=4)\n")
    return kernels + "\n\n" + _ROWS_MODEL.format(launch=launch)


def _rows_chunked(m: Member) -> str:
    name = f"{_snake(m)}_chunked_kernel"
    kernel = (f"@triton.jit\ndef {name}(x_ptr, w_ptr, y_ptr, n_cols, stride, eps, scale, BLOCK: tl.constexpr):\n"
              "    row = tl.program_id(0).to(tl.int64)\n    offs = tl.arange(0, BLOCK)\n"
              "    acc = tl.zeros((BLOCK,), tl.float32)\n    for c0 in range(0, n_cols, BLOCK):\n"
              "        x = tl.load(x_ptr + row * stride + c0 + offs, mask=c0 + offs < n_cols, other=0.0)\n"
              "        acc += x * x\n    rstd = tl.math.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)\n"
              "    for c0 in range(0, n_cols, BLOCK):\n        cols = c0 + offs\n        mask = cols < n_cols\n"
              "        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)\n"
              "        w = tl.load(w_ptr + cols, mask=mask, other=0.0)\n        y = x * rstd * w\n"
              + "".join("    " + line + "\n" for line in _epilogue(m, "y_ptr + row * stride + cols").splitlines()))
    launch = (f"        {name}[(n_rows,)](x2, self.weight, y, n_cols, x2.stride(0), self.eps, self.scale,\n"
              f"        {' ' * (len(name) + 10)}BLOCK=256, num_warps=2)\n")
    return kernel + "\n\n" + _ROWS_MODEL.format(launch=launch)


def _rows(m: Member) -> dict[str, tuple[str, str]]:
    if m.lacking == 0:
        lname = "lacking_two_pass"
        lwhat = "a per-row rstd kernel looping over 1024-wide chunks, then a 2D-grid kernel applying it"
        ldoc = (f'"""{m.title} in two kernels: a per-row rstd over 1024-wide chunks, then a 2D-grid apply.\n\n'
                "Practice pair, the kernel lacking one_pass_row_reduction: x is read twice, the rstd makes\n"
                'a round trip through memory, and there are two launches.\n"""\n')
        lbody = _rows_two_pass(m)
    else:
        lname = "lacking_chunked_loops"
        lwhat = "one program per row looping twice over 256-wide chunks (sum of squares, then apply), 2 warps"
        ldoc = (f'"""{m.title} in one kernel that loops twice over 256-wide chunks of each row, 2 warps.\n\n'
                "Practice pair, the kernel lacking one_pass_row_reduction: one launch, but each row is\n"
                "loaded twice (once for the sum of squares, once to apply it) in small chunks, instead of\n"
                'held in registers once.\n"""\n')
        lbody = _rows_chunked(m)
    wdoc = (f'"""{m.title} in one pass: one program per row holds the whole row in registers, 8 warps.\n\n'
            "Practice pair, the kernel with one_pass_row_reduction: BLOCK is the next power of two of\n"
            "the row, so the sum of squares, the normalisation and the epilogue happen on one load of\n"
            'the row, with one store.\n"""\n')
    return {lname: (ldoc + _imports(m, True) + "\n\n" + lbody, lwhat),
            "with_one_pass_row_reduction": (wdoc + _imports(m, True) + "\n\n" + _rows_one_pass(m),
                                            "one program per row, BLOCK = next power of two of the row, reduce + "
                                            "normalise + epilogue in registers, 8 warps")}


RENDER = {"fuse_elementwise_chain": (_ew_task, _elementwise), "gemm_tile128_fused_epilogue": (_gemm_task, _gemm),
          "one_pass_row_reduction": (_rows_task, _rows)}


def members() -> list[tuple[str, Member]]:
    return [(tech, m) for tech, ms in FAMILIES.items() for m in ms]


def render() -> tuple[dict[Path, str], dict[str, list[dict]]]:
    """(path -> text of every task and kernel file, task -> its manifest entries)."""
    files: dict[Path, str] = {}
    entries: dict[str, list[dict]] = {}
    for tech, m in members():
        task_src, kernels = RENDER[tech]
        files[TASKS / f"{m.task}.py"] = task_src(m)
        entries[m.task] = []
        for name, (src, what) in kernels(m).items():
            rel = f"{m.task}/{name}.py"
            files[VARIANTS / rel] = src
            entries[m.task].append({"name": name, "file": rel, "correct": True,
                                    "role": "with" if name.startswith("with_") else "lacking", "technique": tech,
                                    "what": what})
    return files, entries


def manifest_with(manifest: dict, entries: dict[str, list[dict]]) -> dict:
    """The manifest with the members' entries, practice tasks and suite names in place."""
    out = json.loads(json.dumps(manifest))
    for tech, m in members():
        out["tasks"][m.task] = entries[m.task]
        practice = out["techniques"][tech]["practice_tasks"]
        if m.task not in practice:
            practice.append(m.task)
        suite = out["suites"]["bench/coevo/tasks"]
        if m.task not in suite:
            suite.append(m.task)
    return out


def main(argv: list[str]) -> int:
    check = "--check" in argv
    files, entries = render()
    path = VARIANTS / "manifest.json"
    manifest = json.loads(path.read_text())
    want = manifest_with(manifest, entries)
    stale = [str(p.relative_to(COEVO)) for p, text in files.items() if not p.is_file() or p.read_text() != text]
    stale += ["variants/manifest.json"] if want != manifest else []
    if check:
        print("\n".join(stale) if stale else "the family files are current")
        return 1 if stale else 0
    for p, text in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    path.write_text(json.dumps(want, indent=2) + "\n")
    print(f"wrote {len(files)} files and {len(entries)} manifest tasks ({len(stale)} changed)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
