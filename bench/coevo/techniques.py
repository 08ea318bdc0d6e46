"""The co-evolution v2's three techniques: what each one is, and whether a source shows it.

``TECHNIQUES``: technique id -> ``{title, trigger, key_idea, example}`` (our own text; the
example is the smallest code that shows the technique: a kernel and its launch line, never
a whole ``ModelNew`` and never a kernel that solves a task on its own).
``technique_present(technique_id, source)``: a static (AST) check of a kernel file or a
skill's Example, pure and cheap; nothing is imported or run. A source that does not parse
shows no technique.

What each check asks for (``fuse_elementwise_chain``, ``gemm_tile128_fused_epilogue``,
``one_pass_row_reduction``):

- fuse_elementwise_chain: exactly one ``@triton.jit`` kernel launch runs (the launches
  reachable from a ``forward``, counting helper calls; every launch where there is no
  ``forward``), not inside a loop; that kernel has one ``tl.store`` and no ``tl.dot`` or
  reduction; every ``BLOCK*`` launch argument resolves to an int >= 1024; ``num_warps``,
  where given, >= 4. A source with one kernel and no launch is judged by the kernel's
  constexpr defaults or autotune configs instead (every config must pass).
- gemm_tile128_fused_epilogue: a kernel whose loop calls ``tl.dot`` and which, after that
  loop, computes on the accumulator (bias, activation, residual...) and stores the result;
  launched (or, with no launch, declared by constexpr defaults or autotune configs) with
  ``BLOCK_M`` and ``BLOCK_N`` >= 128.
- one_pass_row_reduction: a kernel with ``tl.program_id``, a reduction (``tl.sum``,
  ``tl.max``, ``tl.min``, ``tl.reduce``), a ``tl.store``, no loop and no ``tl.dot``; its
  ``BLOCK*`` launch arguments come from ``next_power_of_2`` (or are ints >= 1024).

Does not cover: judging speed or correctness (the evaluator does), nor which task a
source belongs to.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Optional, Union

TECHNIQUE_IDS = ("fuse_elementwise_chain", "gemm_tile128_fused_epilogue", "one_pass_row_reduction")

TECHNIQUES: dict[str, dict[str, str]] = {
    "fuse_elementwise_chain": {
        "title": "Fuse an elementwise chain into one wide kernel",
        "trigger": "the model applies several elementwise ops (activation, scale, bias, clamp, residual) "
                   "to the same tensor; eager runs one kernel per op and writes every intermediate to memory",
        "key_idea": "one @triton.jit kernel, launched once: load each input element once, compute the whole "
                    "chain in registers, store once; 1024-4096 elements per program and 4-8 warps so enough "
                    "bytes are in flight to reach the memory bandwidth",
        "example": '''@triton.jit
def chain_kernel(a_ptr, b_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0.0)       # one load per input
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    t = tl.maximum(a * alpha + b, 0.0)                     # the whole chain in registers
    tl.store(out_ptr + offs, t - 0.5 * b, mask=mask)       # one store

chain_kernel[(triton.cdiv(n, 2048),)](a, b, out, n, alpha, BLOCK=2048, num_warps=8)
''',
    },
    "gemm_tile128_fused_epilogue": {
        "title": "128x128 GEMM tiles with the epilogue fused before the store",
        "trigger": "a matmul or linear layer followed by a bias, an activation or a residual; eager writes the "
                   "GEMM output and reads it back for each following op",
        "key_idea": "tile the output 128x128 (K step 32) and accumulate with tl.dot in float32 (tensor cores, "
                    "128-fold operand reuse); apply bias / activation / residual to the accumulator in "
                    "registers, then store once; 8 warps, 3 stages",
        "example": '''@triton.jit
def gemm_epilogue_kernel(a_ptr, w_ptr, c_ptr, out_ptr, M, N, K,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k0 in range(0, K, BLOCK_K):                        # a: (M, K), w: (N, K)
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc = tl.dot(a, w, acc)
    acc = tl.abs(acc + tl.load(c_ptr + rn, mask=rn < N, other=0.0)[None, :])   # epilogue on the accumulator
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

grid = (triton.cdiv(M, 128), triton.cdiv(N, 128))
gemm_epilogue_kernel[grid](a, w, c, out, M, N, K, BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=8, num_stages=3)
''',
    },
    "one_pass_row_reduction": {
        "title": "One program per row, the whole row in registers",
        "trigger": "a per-row reduction (mean, sum of squares, max) whose result rescales the same row, "
                   "followed by elementwise ops, with rows of up to a few thousand elements",
        "key_idea": "launch one program per row with BLOCK = next_power_of_2(n_cols): load the row once, "
                    "reduce with tl.sum / tl.max, normalise and apply the epilogue in registers, store once; "
                    "no column loop, no second pass, no intermediate in memory",
        "example": '''@triton.jit
def row_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)                    # one program per row
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)   # the whole row, once
    centred = x - tl.sum(x, axis=0) / n_cols               # reduce and rescale in registers
    tl.store(out_ptr + row * stride + cols, tl.abs(centred), mask=mask)

row_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=triton.next_power_of_2(n_cols), num_warps=8)
''',
    },
}

_REDUCTIONS = {"sum", "max", "min", "reduce", "argmax", "argmin"}
_POW2 = "pow2"  # a size resolved to next_power_of_2(...)
_Value = Union[int, str, None]


@dataclass
class _Launch:
    kernel: str
    kwargs: dict[str, ast.expr]
    scope: Optional[ast.FunctionDef]  # the function the launch is in (None: module level)
    in_loop: bool


@dataclass
class _Module:
    tree: ast.Module
    kernels: dict[str, ast.FunctionDef] = field(default_factory=dict)
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)  # module functions and methods
    launches: list[_Launch] = field(default_factory=list)


# ----------------------------------------------------------------------------- reading
def _tail(node: ast.expr) -> str:
    """The last name of ``a.b.c`` / ``c`` / ``c(...)``, else ''."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any(_tail(d) == "jit" for d in fn.decorator_list)


def _is_tl_call(node: ast.AST, names: set[str]) -> bool:
    """``tl.<name>(...)`` (or ``triton.language.<name>``) for a name in ``names``."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names \
        and _tail(node.func.value) in ("tl", "language")


class _LaunchFinder(ast.NodeVisitor):
    def __init__(self, mod: _Module):
        self.mod, self.scope, self.loops = mod, None, 0

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name in self.mod.kernels and self.mod.kernels[node.name] is node:
            return  # a kernel body launches nothing
        outer, loops = self.scope, self.loops
        self.scope, self.loops = node, 0
        self.generic_visit(node)
        self.scope, self.loops = outer, loops

    visit_AsyncFunctionDef = visit_FunctionDef

    def _loop(self, node: ast.AST) -> None:
        self.loops += 1
        self.generic_visit(node)
        self.loops -= 1

    visit_For = visit_While = visit_ListComp = visit_GeneratorExp = _loop

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Subscript) and isinstance(f.value, ast.Name) and f.value.id in self.mod.kernels:
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            self.mod.launches.append(_Launch(f.value.id, kw, self.scope, self.loops > 0))
        self.generic_visit(node)


def _read(source: str) -> Optional[_Module]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    mod = _Module(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            if _is_jit(node):
                mod.kernels[node.name] = node
            else:
                mod.functions.setdefault(node.name, node)
    _LaunchFinder(mod).visit(tree)
    return mod


# ----------------------------------------------------------------------------- values
def _assigned(scope: Optional[ast.AST], name: str) -> Optional[ast.expr]:
    """The last ``name = <expr>`` in ``scope`` (not inside nested functions)."""
    if scope is None:
        return None
    found = None
    stack = list(getattr(scope, "body", []))
    while stack:
        node = stack.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            found = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            found = node.value
        stack.extend(c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt))
    return found


def _value(expr: Optional[ast.expr], scope: Optional[ast.AST], tree: ast.Module, depth: int = 0) -> _Value:
    """An int, ``_POW2`` for ``next_power_of_2(...)``, or None when it cannot be told."""
    if expr is None or depth > 8:
        return None
    if isinstance(expr, ast.Constant) and type(expr.value) is int:
        return expr.value
    if isinstance(expr, ast.Name):
        inner = _assigned(scope, expr.id)
        if inner is not None:
            return _value(inner, scope, tree, depth + 1)
        return _value(_assigned(tree, expr.id), tree, tree, depth + 1)
    if isinstance(expr, ast.Call):
        name = _tail(expr.func)
        if name == "next_power_of_2":
            return _POW2
        if name in ("max", "min"):
            vals = [_value(a, scope, tree, depth + 1) for a in expr.args]
            if _POW2 in vals:
                return _POW2
            ints = [v for v in vals if isinstance(v, int)]
            if ints and len(ints) == len(vals):
                return max(ints) if name == "max" else min(ints)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Mult, ast.FloorDiv, ast.Add, ast.Sub)):
        a, b = _value(expr.left, scope, tree, depth + 1), _value(expr.right, scope, tree, depth + 1)
        if isinstance(a, int) and isinstance(b, int):
            return {ast.Mult: a * b, ast.Add: a + b, ast.Sub: a - b}.get(type(expr.op), a // b if b else None)
    return None


def _constexpr_defaults(fn: ast.FunctionDef) -> dict[str, ast.expr]:
    args = fn.args.args
    return {a.arg: d for a, d in zip(args[len(args) - len(fn.args.defaults):], fn.args.defaults)}


def _autotune_values(fn: ast.FunctionDef) -> list[dict[str, ast.expr]]:
    """One {name: expr} per ``triton.Config({...}, num_warps=...)`` of an autotune decorator."""
    out = []
    for dec in fn.decorator_list:
        if isinstance(dec, ast.Call) and _tail(dec.func) == "autotune":
            for node in ast.walk(dec):
                if isinstance(node, ast.Call) and _tail(node.func) == "Config" and node.args \
                        and isinstance(node.args[0], ast.Dict):
                    d = {k.value: v for k, v in zip(node.args[0].keys, node.args[0].values)
                         if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                    d.update({k.arg: k.value for k in node.keywords if k.arg})
                    out.append(d)
    return out


def _configs(mod: _Module, name: str) -> list[tuple[dict[str, ast.expr], Optional[ast.AST]]]:
    """How kernel ``name`` is configured: one (arguments, scope) per launch; with no launch,
    its autotune configs, else its constexpr defaults."""
    fn = mod.kernels[name]
    defaults = _constexpr_defaults(fn)
    launches = [(defaults | lc.kwargs, lc.scope) for lc in mod.launches if lc.kernel == name]
    if launches:
        return launches
    tuned = _autotune_values(fn)
    return [(defaults | t, mod.tree) for t in tuned] or [(defaults, mod.tree)]


# ----------------------------------------------------------------------------- launches run
def _calls_in(fn: ast.FunctionDef, functions: dict[str, ast.FunctionDef]) -> list[str]:
    """Names of module functions / methods ``fn`` calls (``helper(...)``, ``self.helper(...)``)."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in functions:
                out.append(f.id)
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" \
                    and f.attr in functions:
                out.append(f.attr)
    return out


def _run_launches(mod: _Module) -> list[_Launch]:
    """The launches a call of ``forward`` (``ModelNew``'s where there is one) runs (one entry
    per run; a launch in a loop twice), or every launch when there is no ``forward``."""
    forward = next((f for c in mod.tree.body if isinstance(c, ast.ClassDef) and c.name == "ModelNew"
                    for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "forward"),
                   mod.functions.get("forward"))
    if forward is None:
        return [x for lc in mod.launches for x in ([lc, lc] if lc.in_loop else [lc])]
    out: list[_Launch] = []

    def visit(fn: ast.FunctionDef, seen: tuple[str, ...]) -> None:
        for lc in mod.launches:
            if lc.scope is fn:
                out.extend([lc, lc] if lc.in_loop else [lc])
        for callee in _calls_in(fn, mod.functions):
            if callee not in seen:
                visit(mod.functions[callee], seen + (callee,))

    visit(forward, ("forward",))
    return out


# ----------------------------------------------------------------------------- the checks
def _count(fn: ast.FunctionDef, names: set[str]) -> int:
    return sum(1 for n in ast.walk(fn) if _is_tl_call(n, names))


def _has_loop(fn: ast.FunctionDef) -> bool:
    return any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(fn))


def _block_values(args: dict[str, ast.expr], scope, tree, key=lambda k: "BLOCK" in k) -> list[_Value]:
    return [_value(v, scope, tree) for k, v in args.items() if k.isupper() and key(k)]


def _fuse_elementwise_chain(mod: _Module) -> bool:
    if not mod.launches and len(mod.kernels) == 1:  # one kernel shown without its launch
        name = next(iter(mod.kernels))
        configs = _configs(mod, name)
    else:
        runs = _run_launches(mod)
        if len(runs) != 1 or runs[0].in_loop:
            return False
        name = runs[0].kernel
        configs = [(_constexpr_defaults(mod.kernels[name]) | runs[0].kwargs, runs[0].scope)]
    fn = mod.kernels[name]
    if _count(fn, {"store"}) != 1 or _count(fn, {"load"}) < 1 or _count(fn, _REDUCTIONS | {"dot"}):
        return False
    for args, scope in configs:
        blocks = _block_values(args, scope, mod.tree)
        if not blocks or not all(isinstance(b, int) and b >= 1024 for b in blocks):
            return False
        warps = _value(args.get("num_warps"), scope, mod.tree) if "num_warps" in args else 4
        if not (isinstance(warps, int) and warps >= 4):
            return False
    return True


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _computes(node: ast.AST) -> bool:
    """Arithmetic or a call other than a dtype cast (``.to``, ``tl.cast``)."""
    return any(isinstance(n, ast.BinOp) or (isinstance(n, ast.Call) and _tail(n.func) not in ("to", "cast"))
               for n in ast.walk(node))


def _fused_epilogue(fn: ast.FunctionDef) -> bool:
    """After the loop holding ``tl.dot``, the accumulator is computed on before it is stored."""
    body = fn.body
    at = next((i for i, s in enumerate(body) if isinstance(s, (ast.For, ast.While))
               and any(_is_tl_call(n, {"dot"}) for n in ast.walk(s))), None)
    if at is None:
        return False
    acc = set()
    for node in ast.walk(body[at]):
        if isinstance(node, (ast.Assign, ast.AugAssign)) and any(_is_tl_call(n, {"dot"}) for n in ast.walk(node.value)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            acc |= {t.id for t in targets if isinstance(t, ast.Name)}
    derived, epilogued = set(acc), set()
    after = [n for s in body[at + 1:] for n in ast.walk(s)]
    for node in after:  # ast.walk keeps statement order within each statement
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            used = _names_in(node.value)
            if used & derived:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {t.id for t in targets if isinstance(t, ast.Name)}
                derived |= names
                if isinstance(node, ast.AugAssign) or _computes(node.value) or used & epilogued:
                    epilogued |= names
    for node in after:
        if _is_tl_call(node, {"store"}):
            value = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "value"),
                                                                 None)
            if value is None:
                continue
            used = _names_in(value)
            if used & epilogued or (used & derived and _computes(value)):
                return True
    return False


def _gemm_tile128_fused_epilogue(mod: _Module) -> bool:
    for name, fn in mod.kernels.items():
        if not _fused_epilogue(fn):
            continue
        for args, scope in _configs(mod, name):
            m = _block_values(args, scope, mod.tree, key=lambda k: k in ("BLOCK_M", "BLOCK_SIZE_M", "BM"))
            n = _block_values(args, scope, mod.tree, key=lambda k: k in ("BLOCK_N", "BLOCK_SIZE_N", "BN"))
            if m and n and all(isinstance(v, int) and v >= 128 for v in m + n):
                return True
    return False


def _one_pass_row_reduction(mod: _Module) -> bool:
    for name, fn in mod.kernels.items():
        if _has_loop(fn) or _count(fn, {"dot"}) or not _count(fn, _REDUCTIONS) or not _count(fn, {"store"}) \
                or not _count(fn, {"program_id"}):
            continue
        for args, scope in _configs(mod, name):
            blocks = _block_values(args, scope, mod.tree)
            if blocks and all(b == _POW2 or (isinstance(b, int) and b >= 1024) for b in blocks):
                return True
            if not blocks and not any(lc.kernel == name for lc in mod.launches):
                return True  # a kernel shown without its launch: its body is the technique
    return False


_CHECKS = {"fuse_elementwise_chain": _fuse_elementwise_chain,
           "gemm_tile128_fused_epilogue": _gemm_tile128_fused_epilogue,
           "one_pass_row_reduction": _one_pass_row_reduction}


def technique_present(technique_id: str, source: str) -> bool:
    """Whether ``source`` (a kernel file or a skill's Example) shows the technique; False for
    a source that does not parse. An unknown id is a ValueError naming the known ones."""
    if technique_id not in _CHECKS:
        raise ValueError(f"unknown technique {technique_id!r} (known: {', '.join(TECHNIQUE_IDS)})")
    mod = _read(source)
    return mod is not None and _CHECKS[technique_id](mod)
