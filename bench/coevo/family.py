"""Practice families: more practice pairs per technique, each a task and its (lacking, with)
kernels whose code mirrors the task's forward, so that the data teach adapting a skill to
the forward at hand rather than recalling a practice kernel by the task's text.

Why (docs/coevolution.md, probes 1 and 2): each technique was first taught on 2 or 3
practice pairs, and a greedy turn 1 with the technique's skill wrote a practice kernel
verbatim on the held-out sibling. Probe 2's first families still gave every member its own
kernel names and docstring, and the model stitched members together (one member's
docstring, another's kernel name, a third's epilogue). So here:

- **one skeleton per technique**, the same names in every member (``chain_kernel``,
  ``linear_act_kernel``, ``row_kernel``...), a docstring that names no member's math;
- **the epilogue mirrors the forward statement by statement**: each ``name = expr`` of the
  forward becomes the same line in the kernel and its ``return expr`` the stored value,
  with ``self.bias`` -> ``b``, ``self.scale_factor`` / ``self.scale`` -> ``scale``,
  ``self.linear(x)`` -> ``acc`` and each activation (``F.relu``, ``torch.tanh``...) a
  ``@triton.jit`` helper of the same name defined above the kernel (``ACTIVATIONS``);
- **activations x forms**: members combine activations and statement forms, so each
  activation is seen in several forms and each form with several activations.

No member has a held-out task's forward (hardswish after a bias then scale and residual;
SiLU after a linear; sigmoid times a scale after an RMSNorm) nor an RL task's (swish,
scale, clamp, residual; GELU after a linear; the SiLU-gated RMSNorm): a test compares the
forwards. The held-out forwards' activations and forms do appear in other combinations (as
a pretrained base would know them); both arms of every comparison share these data.

``python bench/coevo/family.py`` writes the members' task files, kernels and manifest
entries (``bench/coevo/variants/manifest.json``: roles ``lacking``/``with``, from which
``protocol.resolve`` adds the practice pairs and tasks); ``--check`` only compares, as
``tests/test_coevo_tasks.py`` does. Does not cover: judging the kernels (the tests and
``prepare`` do) or the SFT rows (``sftdata.py``).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

COEVO = Path(__file__).resolve().parent
TASKS, VARIANTS = COEVO / "tasks", COEVO / "variants"

# activation -> (the forward's call, the helper's parameters, the helper's body)
ACTIVATIONS: dict[str, tuple[str, str, str]] = {
    "relu": ("F.relu", "v", "tl.maximum(v, 0.0)"),
    "sigmoid": ("torch.sigmoid", "v", "tl.sigmoid(v)"),
    "tanh": ("torch.tanh", "v", "2.0 * tl.sigmoid(2.0 * v) - 1.0"),
    "silu": ("F.silu", "v", "v * tl.sigmoid(v)"),
    "gelu": ("F.gelu", "v", "0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476))"),
    "elu": ("F.elu", "v", "tl.where(v > 0, v, tl.exp(tl.minimum(v, 0.0)) - 1.0)"),
    "softplus": ("F.softplus", "v", "tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(tl.minimum(v, 20.0))))"),
    "hardswish": ("F.hardswish", "v", "v * tl.minimum(tl.maximum(v + 3.0, 0.0), 6.0) / 6.0"),
    "hardsigmoid": ("F.hardsigmoid", "v", "tl.minimum(tl.maximum(v / 6.0 + 0.5, 0.0), 1.0)"),
    "leaky_relu": ("F.leaky_relu", "v, slope", "tl.where(v >= 0, v, v * slope)"),
}
TITLE = {"relu": "ReLU", "sigmoid": "Sigmoid", "tanh": "Tanh", "silu": "SiLU", "gelu": "GELU", "elu": "ELU",
         "softplus": "Softplus", "hardswish": "HardSwish", "hardsigmoid": "HardSigmoid", "leaky_relu": "LeakyReLU"}

# elementwise forms: the forward's statements in a neutral spelling (A: the activation, B: the
# bias, S: the scale), the last one the return; every form uses the bias and the scale
FORMS: dict[str, tuple[str, list[str]]] = {
    "Scale_Bias": ("A(x) * S + B", ["return A(x) * S + B"]),
    "Bias_Scale": ("A(x + B) * S", ["return A(x + B) * S"]),
    "Bias_Scale_Residual": ("A(x + B) * S + x", ["y = A(x + B)", "return y * S + x"]),
    "Scale_Bias_Out": ("A(x * S) + B", ["y = A(x * S)", "return y + B"]),
    "Bias_Residual_Scale": ("(A(x) + B) * S + x", ["y = A(x) + B", "return y * S + x"]),
    "Bias_Residual_Scaled": ("A(x + B) + x * S", ["return A(x + B) + x * S"]),
}


@dataclass(frozen=True)
class Member:
    """One task of a family: its level and number, its activation, and (elementwise) its
    form; ``lacking`` picks the member's lacking form (0 or 1); ``cpu``: its CPU_SHAPES;
    ``anchor``: the member gets every kind of practice row (apply, summary, select) and its
    kernels are judged by ``prepare`` on the GPU; the other members (the grid) get the apply
    rows only and are judged on the CPU in the tests."""

    level: int
    number: int
    act: str
    form: str
    lacking: int
    cpu: tuple
    anchor: bool = True

    @property
    def name(self) -> str:
        tail = {"gemm": "Linear_Bias_" + TITLE[self.act], "rows": f"RMSNorm_{TITLE[self.act]}_Scale"}
        return tail.get(self.form, f"{TITLE[self.act]}_{self.form}")

    @property
    def task(self) -> str:
        return f"level{self.level}/{self.number}_{self.name}"


ELEMENTWISE = [
    Member(1, 23, "relu", "Bias_Scale_Residual", 1, (6, 70)),
    Member(1, 24, "elu", "Bias_Scale_Residual", 0, (5, 66)),
    Member(1, 25, "tanh", "Bias_Scale_Residual", 1, (7, 40)),
    Member(1, 26, "gelu", "Bias_Scale_Residual", 0, (4, 88)),
    Member(1, 27, "hardswish", "Bias_Scale", 0, (6, 52)),
    Member(1, 28, "hardswish", "Scale_Bias_Out", 1, (5, 60)),
    Member(1, 29, "sigmoid", "Bias_Residual_Scaled", 1, (3, 76)),
    Member(1, 30, "sigmoid", "Scale_Bias", 0, (6, 45)),
    Member(1, 31, "leaky_relu", "Bias_Residual_Scaled", 0, (5, 58)),
    Member(1, 32, "silu", "Bias_Residual_Scale", 1, (4, 64)),
    Member(1, 33, "hardsigmoid", "Bias_Scale", 0, (7, 36)),
    Member(1, 34, "softplus", "Scale_Bias_Out", 1, (5, 50)),
]
GEMM = [
    Member(2, 14, "relu", "gemm", 0, (24, 48, 40)),
    Member(2, 15, "tanh", "gemm", 1, (30, 36, 44)),
    Member(2, 16, "leaky_relu", "gemm", 0, (18, 56, 28)),
    Member(2, 17, "elu", "gemm", 1, (26, 40, 52)),
    Member(2, 18, "hardswish", "gemm", 0, (20, 44, 36)),
    Member(2, 19, "softplus", "gemm", 1, (22, 52, 30)),
]
ROWS = [
    Member(2, 20, "relu", "rows", 0, (7, 80)),
    Member(2, 21, "tanh", "rows", 1, (5, 96)),
    Member(2, 22, "gelu", "rows", 0, (6, 64)),
    Member(2, 23, "elu", "rows", 1, (8, 56)),
    Member(2, 24, "silu", "rows", 0, (5, 72)),
    Member(2, 25, "hardswish", "rows", 1, (6, 88)),
]
# the held-out and RL tasks' own (activation, form): never a member
EXCLUDED = {("hardswish", "Bias_Scale_Residual"), ("silu", "gemm"), ("gelu", "gemm"), ("sigmoid", "rows")}


def _grid(anchors: list[Member], forms: list[str], level: int, first: int) -> list[Member]:
    """Every (activation, form) not an anchor and not excluded, as apply-only members."""
    have = {(m.act, m.form) for m in anchors}
    out = []
    for form in forms:
        for act in ACTIVATIONS:
            if (act, form) in have or (act, form) in EXCLUDED:
                continue
            n = first + len(out)
            cpu = (3 + n % 5, 33 + 7 * (n % 9)) if form not in ("gemm",) else (17 + n % 9, 29 + n % 13, 31 + n % 11)
            out.append(Member(level, n, act, form, n % 2, cpu, anchor=False))
    return out


ELEMENTWISE += _grid(ELEMENTWISE, list(FORMS), 1, 35)
GEMM += _grid(GEMM, ["gemm"], 2, 26)
ROWS += _grid(ROWS, ["rows"], 2, 26 + len(GEMM) - 6)
FAMILIES = {"fuse_elementwise_chain": ELEMENTWISE, "gemm_tile128_fused_epilogue": GEMM,
            "one_pass_row_reduction": ROWS}

KERNEL_IMPORTS = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"


def _task_imports(m: Member) -> str:
    """A task file's imports: torch.nn.functional only where its forward calls it."""
    fn = "import torch.nn.functional as F\n" if ACTIVATIONS[m.act][0].startswith("F.") else ""
    return "import torch\nimport torch.nn as nn\n" + fn


def _call(act: str, arg: str, torch: bool) -> str:
    """The activation applied to ``arg``, as the forward writes it or as the kernel does."""
    fn = ACTIVATIONS[act][0] if torch else act
    return f"{fn}({arg}, 0.2)" if act == "leaky_relu" else f"{fn}({arg})"


def _spell(text: str, act: str, torch: bool, bias: str, scale: str) -> str:
    """A neutral statement spelled for the forward (``torch``) or for the kernel."""
    text = re.sub(r"\bB\b", bias, re.sub(r"\bS\b", scale, text))
    out, i = "", 0
    while (j := text.find("A(", i)) >= 0:  # A(...) -> the activation's call, balanced parentheses
        depth, k = 0, j + 1
        while True:
            depth += {"(": 1, ")": -1}.get(text[k], 0)
            if depth == 0:
                break
            k += 1
        out += text[i:j] + _call(act, text[j + 2:k], torch)
        i = k + 1
    return out + text[i:]


def _helper(act: str) -> str:
    _, params, body = ACTIVATIONS[act]
    return f"@triton.jit\ndef {act}({params}):\n    return {body}\n"


def _docstring(first: str, body: str) -> str:
    return f'"""{first}\n\n{body}\n"""\n'


# ----------------------------------------------------------------------------- elementwise
def _ew_task(m: Member) -> str:
    title, stmts = FORMS[m.form]
    forward = "".join(f"        {_spell(s, m.act, True, 'self.bias', 'self.scale_factor')}\n" for s in stmts)
    math = _spell(title, m.act, True, "bias", "scale").replace("F.", "").replace("torch.", "")
    return _docstring(f"Elementwise chain: {math}, float32, with a learned per-feature bias.",
                      "Practice task of the co-evolution v2 (technique fuse_elementwise_chain; SFT only): eager\n"
                      "runs one kernel per op.\n\nop_type: fusion/elementwise") + _task_imports(m) + f'''
batch_size = 8192
dim = 4096
scale_factor = {1.25 + 0.25 * (m.number % 4)}

CPU_SHAPES = {{"batch_size": {m.cpu[0]}, "dim": {m.cpu[1]}}}
PERTURB = ["batch_size", "dim"]


class Model(nn.Module):
    def __init__(self, dim: int, scale_factor: float):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
{forward}

def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, scale_factor]
'''


_EW_MODEL = '''class ModelNew(nn.Module):
    def __init__(self, dim: int, scale_factor: float):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.scale_factor = scale_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
{launch}        return out
'''
_EW_HEAD = ("    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)\n"
            "    mask = offs < n_elements\n")
_EW_LOADS = ("    x = tl.load(x_ptr + offs, mask=mask, other=0.0)\n"
             "    b = tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0)\n")


def _ew_loads(used: str) -> str:
    """The loads of x and b that ``used`` (the kernel's computing lines) reads."""
    return "".join(line + "\n" for line, v in zip(_EW_LOADS.splitlines(), "xb") if re.search(rf"\b{v}\b", used))


def _ew_body(m: Member, stmts: list[str]) -> str:
    lines = [_spell(s, m.act, False, "b", "scale") for s in stmts]
    *assign, ret = lines
    return "".join(f"    {s}\n" for s in assign) + f"    tl.store(out_ptr + offs, {ret[len('return '):]}, mask=mask)\n"


def _ew_one(m: Member, block: int, warps: int) -> str:
    kernel = ("@triton.jit\ndef chain_kernel(x_ptr, b_ptr, out_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):\n"
              + _EW_HEAD + _EW_LOADS + _ew_body(m, FORMS[m.form][1]))
    launch = (f"        chain_kernel[(triton.cdiv(n, {block}),)](x, self.bias, out, n, x.shape[-1], self.scale_factor,\n"
              f"                                          BLOCK={block}, num_warps={warps})\n")
    return _helper(m.act) + "\n\n" + kernel + "\n\n" + _EW_MODEL.format(launch=launch)


def _ew_two(m: Member) -> str:
    """Two-statement forms: the first statement to a temporary, the return in a second kernel."""
    first, ret = FORMS[m.form][1]
    first, ret = _spell(first, m.act, False, "b", "scale"), _spell(ret, m.act, False, "b", "scale")[len("return "):]
    k1 = ("@triton.jit\ndef first_kernel(x_ptr, b_ptr, y_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):\n"
          + _EW_HEAD + _ew_loads(first) + f"    {first}\n    tl.store(y_ptr + offs, y, mask=mask)\n")
    k2 = ("@triton.jit\ndef rest_kernel(y_ptr, x_ptr, b_ptr, out_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):\n"
          + _EW_HEAD + "    y = tl.load(y_ptr + offs, mask=mask, other=0.0)\n" + _ew_loads(ret)
          + f"    tl.store(out_ptr + offs, {ret}, mask=mask)\n")
    launch = ("        y = torch.empty_like(x)\n        grid = (triton.cdiv(n, 1024),)\n"
              "        first_kernel[grid](x, self.bias, y, n, x.shape[-1], self.scale_factor, BLOCK=1024, num_warps=4)\n"
              "        rest_kernel[grid](y, x, self.bias, out, n, x.shape[-1], self.scale_factor, BLOCK=1024, "
              "num_warps=4)\n")
    return _helper(m.act) + "\n\n" + k1 + "\n\n" + k2 + "\n\n" + _EW_MODEL.format(launch=launch)


def _elementwise(m: Member) -> dict[str, tuple[str, str]]:
    """name -> (source, what) of the member's lacking and with kernels."""
    two = m.lacking == 1 and len(FORMS[m.form][1]) == 2
    if two:
        lname, lwhat = "lacking_two_kernels", "the first statement to a temporary, the return in a second kernel"
        ldoc = _docstring("The forward's elementwise chain in two kernels: the first statement to a temporary, "
                          "then the rest.",
                          "Practice pair, the kernel lacking fuse_elementwise_chain: the launches are wide (1024\n"
                          "elements, 4 warps), but the chain is split, so the temporary is written and read back.")
        lbody = _ew_two(m)
    else:
        lname, lwhat = "lacking_block32", "the chain in one kernel, poor launch: 32 elements per 1-warp program"
        ldoc = _docstring("The forward's elementwise chain in one kernel with a poor launch: 32 elements per "
                          "1-warp program.",
                          "Practice pair, the kernel lacking fuse_elementwise_chain: each program moves only 128\n"
                          "bytes per load, too little in flight to approach the memory bandwidth.")
        lbody = _ew_one(m, 32, 1)
    wdoc = _docstring("The forward's elementwise chain in one kernel: 4096 elements per program, 8 warps.",
                      "Practice pair, the kernel with fuse_elementwise_chain: the kernel's lines are the forward's\n"
                      "statements; each input element is read once and each output written once.")
    return {lname: (ldoc + KERNEL_IMPORTS + "\n\n" + lbody, lwhat),
            "with_fuse_elementwise_chain": (wdoc + KERNEL_IMPORTS + "\n\n" + _ew_one(m, 4096, 8),
                                            "the chain in one kernel, 4096 elements per program, 8 warps")}


# ----------------------------------------------------------------------------- GEMM
def _gemm_task(m: Member) -> str:
    b, i, o = m.cpu
    math = _call(m.act, "x @ W^T + b", False)
    return _docstring(f"Linear layer with bias, then an activation: {math}, float32.",
                      "Practice task of the co-evolution v2 (technique gemm_tile128_fused_epilogue; SFT only):\n"
                      "eager runs a GEMM with bias, then the activation.\n\nop_type: fusion/gemm_epilogue") + _task_imports(m) + f'''
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
        return {_call(m.act, "self.linear(x)", True)}


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
    kernel = ("@triton.jit\ndef linear_act_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,\n"
              "                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):\n"
              + _GEMM_LOOP + "    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]\n"
              + _GEMM_STORE.format(v=_call(m.act, "acc", False)))
    launch = (f"        grid = (triton.cdiv(M, {tile}), triton.cdiv(N, {tile}))\n"
              f"        linear_act_kernel[grid](x2, w, self.linear.bias, y, M, N, K, BLOCK_M={tile}, BLOCK_N={tile},\n"
              f"                                BLOCK_K=32, num_warps={warps}, num_stages={stages})\n")
    return _helper(m.act) + "\n\n" + kernel + "\n\n" + _GEMM_MODEL.format(launch=launch)


def _gemm_unfused16(m: Member) -> str:
    kernels = ("@triton.jit\ndef matmul_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, "
               "BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):\n" + _GEMM_LOOP + _GEMM_STORE.format(v="acc")
               + "\n\n@triton.jit\ndef bias_act_kernel(y_ptr, b_ptr, n_elements, N, BLOCK: tl.constexpr):\n"
               "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    mask = offs < n_elements\n"
               "    acc = tl.load(y_ptr + offs, mask=mask, other=0.0) + tl.load(b_ptr + offs % N, mask=mask, "
               "other=0.0)\n"
               f"    tl.store(y_ptr + offs, {_call(m.act, 'acc', False)}, mask=mask)\n")
    launch = ("        grid = (triton.cdiv(M, 16), triton.cdiv(N, 16))\n"
              "        matmul_kernel[grid](x2, w, y, M, N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=1, "
              "num_stages=1)\n"
              "        bias_act_kernel[(triton.cdiv(M * N, 32),)](y, self.linear.bias, M * N, N, BLOCK=32, "
              "num_warps=1)\n")
    return _helper(m.act) + "\n\n" + kernels + "\n\n" + _GEMM_MODEL.format(launch=launch)


def _gemm(m: Member) -> dict[str, tuple[str, str]]:
    if m.lacking == 0:
        lname = "lacking_tile16_unfused"
        lwhat = "a 16x16x16-tile 1-warp GEMM writes x @ W^T, then a 32-wide 1-warp kernel adds the bias and the activation"
        ldoc = _docstring("The forward's linear layer and activation unfused with tiny tiles: a 16x16x16-tile GEMM, "
                          "then a 32-wide kernel for the bias and the activation.",
                          "Practice pair, the kernel lacking gemm_tile128_fused_epilogue: each tile reloads its\n"
                          "operands for only 16x16 outputs, and the product makes a round trip through memory.")
        lbody = _gemm_unfused16(m)
    else:
        lname = "lacking_tile64_fused"
        lwhat = "the bias and the activation fused before the store, but 64x64x32 tiles and 4 warps"
        ldoc = _docstring("The forward's linear layer and activation as one Triton GEMM with the epilogue fused, "
                          "but 64x64x32 tiles and 4 warps.",
                          "Practice pair, the kernel lacking gemm_tile128_fused_epilogue: each 64x64 tile gets half\n"
                          "the arithmetic intensity of a 128x128 one.")
        lbody = _gemm_fused(m, 64, 4, 2)
    wdoc = _docstring("The forward's linear layer and activation as one Triton GEMM: 128x128x32 tiles, the bias "
                      "and the activation in the epilogue, 8 warps.",
                      "Practice pair, the kernel with gemm_tile128_fused_epilogue: the accumulator gets the bias\n"
                      "and the forward's activation in registers before the one store of each output tile.")
    return {lname: (ldoc + KERNEL_IMPORTS + "\n\n" + lbody, lwhat),
            "with_gemm_tile128_fused_epilogue": (wdoc + KERNEL_IMPORTS + "\n\n" + _gemm_fused(m, 128, 8, 3),
                                                 "one GEMM with 128x128x32 tiles, bias and activation before the "
                                                 "store, 8 warps")}


# ----------------------------------------------------------------------------- rows
def _rows_task(m: Member) -> str:
    math = _call(m.act, "rmsnorm(x) * weight", False) + " * scale"
    return _docstring(f"Row reduction then an epilogue: {math}, float32.",
                      "Practice task of the co-evolution v2 (technique one_pass_row_reduction; SFT only): eager\n"
                      "runs one kernel per op.\n\nop_type: fusion/normalization") + _task_imports(m) + f'''
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
        return {_call(m.act, "y", True)} * self.scale


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
        out = torch.empty_like(x2)
        n_rows, n_cols = x2.shape
{launch}        return out.view(x.shape)
'''


def _rows_store(m: Member, indent: str = "    ") -> str:
    return f"{indent}tl.store(out_ptr + row * stride + cols, {_call(m.act, 'y', False)} * scale, mask=mask)\n"


def _rows_one_pass(m: Member) -> str:
    kernel = ("@triton.jit\ndef row_kernel(x_ptr, w_ptr, out_ptr, n_cols, stride, eps, scale, BLOCK: tl.constexpr):\n"
              "    row = tl.program_id(0).to(tl.int64)\n    cols = tl.arange(0, BLOCK)\n    mask = cols < n_cols\n"
              "    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)\n"
              "    w = tl.load(w_ptr + cols, mask=mask, other=0.0)\n"
              "    rstd = tl.math.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)\n    y = x * rstd * w\n"
              + _rows_store(m))
    launch = ("        block = triton.next_power_of_2(n_cols)\n"
              "        row_kernel[(n_rows,)](x2, self.weight, out, n_cols, x2.stride(0), self.eps, self.scale,\n"
              "                              BLOCK=block, num_warps=8)\n")
    return _helper(m.act) + "\n\n" + kernel + "\n\n" + _ROWS_MODEL.format(launch=launch)


def _rows_two_pass(m: Member) -> str:
    kernels = ("@triton.jit\ndef row_rstd_kernel(x_ptr, r_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):\n"
               "    row = tl.program_id(0).to(tl.int64)\n    cols = tl.arange(0, BLOCK)\n"
               "    acc = tl.zeros((BLOCK,), tl.float32)\n    for c0 in range(0, n_cols, BLOCK):\n"
               "        x = tl.load(x_ptr + row * stride + c0 + cols, mask=c0 + cols < n_cols, other=0.0)\n"
               "        acc += x * x\n"
               "    tl.store(r_ptr + row, tl.math.rsqrt(tl.sum(acc, axis=0) / n_cols + eps))\n\n\n"
               "@triton.jit\ndef row_apply_kernel(x_ptr, w_ptr, out_ptr, r_ptr, n_cols, stride, scale, "
               "BLOCK: tl.constexpr):\n"
               "    row = tl.program_id(0).to(tl.int64)\n    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)\n"
               "    mask = cols < n_cols\n    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)\n"
               "    w = tl.load(w_ptr + cols, mask=mask, other=0.0)\n    y = x * tl.load(r_ptr + row) * w\n"
               + _rows_store(m))
    launch = ("        rstd = torch.empty(n_rows, device=x.device, dtype=torch.float32)\n"
              "        row_rstd_kernel[(n_rows,)](x2, rstd, n_cols, x2.stride(0), self.eps, BLOCK=1024, num_warps=4)\n"
              "        grid = (n_rows, triton.cdiv(n_cols, 1024))\n"
              "        row_apply_kernel[grid](x2, self.weight, out, rstd, n_cols, x2.stride(0), self.scale, "
              "BLOCK=1024, num_warps=4)\n")
    return _helper(m.act) + "\n\n" + kernels + "\n\n" + _ROWS_MODEL.format(launch=launch)


def _rows_chunked(m: Member) -> str:
    kernel = ("@triton.jit\ndef row_chunked_kernel(x_ptr, w_ptr, out_ptr, n_cols, stride, eps, scale, "
              "BLOCK: tl.constexpr):\n"
              "    row = tl.program_id(0).to(tl.int64)\n    offs = tl.arange(0, BLOCK)\n"
              "    acc = tl.zeros((BLOCK,), tl.float32)\n    for c0 in range(0, n_cols, BLOCK):\n"
              "        x = tl.load(x_ptr + row * stride + c0 + offs, mask=c0 + offs < n_cols, other=0.0)\n"
              "        acc += x * x\n    rstd = tl.math.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)\n"
              "    for c0 in range(0, n_cols, BLOCK):\n        cols = c0 + offs\n        mask = cols < n_cols\n"
              "        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)\n"
              "        w = tl.load(w_ptr + cols, mask=mask, other=0.0)\n        y = x * rstd * w\n"
              + _rows_store(m, "        "))
    launch = ("        row_chunked_kernel[(n_rows,)](x2, self.weight, out, n_cols, x2.stride(0), self.eps, self.scale,\n"
              "                                      BLOCK=256, num_warps=2)\n")
    return _helper(m.act) + "\n\n" + kernel + "\n\n" + _ROWS_MODEL.format(launch=launch)


def _rows(m: Member) -> dict[str, tuple[str, str]]:
    if m.lacking == 0:
        lname = "lacking_two_pass"
        lwhat = "a per-row rstd kernel looping over 1024-wide chunks, then a 2D-grid kernel applying it"
        ldoc = _docstring("The forward's row norm and epilogue in two kernels: a per-row rstd over 1024-wide chunks, "
                          "then a 2D-grid apply.",
                          "Practice pair, the kernel lacking one_pass_row_reduction: x is read twice, the rstd makes\n"
                          "a round trip through memory, and there are two launches.")
        lbody = _rows_two_pass(m)
    else:
        lname = "lacking_chunked_loops"
        lwhat = "one program per row looping twice over 256-wide chunks (sum of squares, then apply), 2 warps"
        ldoc = _docstring("The forward's row norm and epilogue in one kernel that loops twice over 256-wide chunks "
                          "of each row, 2 warps.",
                          "Practice pair, the kernel lacking one_pass_row_reduction: each row is loaded twice in\n"
                          "small chunks instead of held in registers once.")
        lbody = _rows_chunked(m)
    wdoc = _docstring("The forward's row norm and epilogue in one pass: one program per row holds the whole row "
                      "in registers, 8 warps.",
                      "Practice pair, the kernel with one_pass_row_reduction: BLOCK is the next power of two of\n"
                      "the row; the sum of squares, the normalisation and the forward's epilogue happen on one\n"
                      "load of the row, with one store.")
    return {lname: (ldoc + KERNEL_IMPORTS + "\n\n" + lbody, lwhat),
            "with_one_pass_row_reduction": (wdoc + KERNEL_IMPORTS + "\n\n" + _rows_one_pass(m),
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
        lists = [out["techniques"][tech]["practice_tasks"], out["suites"]["bench/coevo/tasks"]]
        if not m.anchor:
            lists.append(out["techniques"][tech].setdefault("apply_only_tasks", []))
        for names in lists:
            if m.task not in names:
                names.append(m.task)
    return out


def main(argv: list[str]) -> int:
    """Write the members' files and manifest entries (only the changed ones, each atomically),
    or with ``--check`` only list what differs (exit 1). Anything else: one line, exit 2."""
    from davinci_kernel.files import write_atomic

    if any(a != "--check" for a in argv):
        print(f"family.py: unknown argument {next(a for a in argv if a != '--check')!r} (only --check)",
              file=sys.stderr)
        return 2
    files, entries = render()
    path = VARIANTS / "manifest.json"
    manifest = json.loads(path.read_text())
    want = manifest_with(manifest, entries)
    stale = [p for p, text in files.items() if not p.is_file() or p.read_text() != text]
    if "--check" in argv:
        names = [str(p.relative_to(COEVO)) for p in stale] + (["variants/manifest.json"] if want != manifest else [])
        print("\n".join(names) if names else "the family files are current")
        return 1 if names else 0
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(p, files[p])
    if want != manifest:
        write_atomic(path, json.dumps(want, indent=2) + "\n")
    print(f"wrote {len(stale)} of {len(files)} files; the manifest {'updated' if want != manifest else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
