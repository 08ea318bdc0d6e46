"""How much work a custom kernel did, read from the kernel itself: the other half of coverage
(``opwork.py`` weighs the torch ops; coverage is custom work over custom plus torch work).

Covers, harness side, on the candidate's source (never on its names):
  * Triton: ``analyze`` parses each ``@triton.jit`` function; ``launch_work`` interprets its
    Python AST abstractly for one launch (the launch grid and the arguments the worker's
    launch wrapper recorded: integers, constexprs, tensor sizes) and counts, per program,
    the work that reaches memory: each arithmetic op, comparison or math call on values
    loaded from memory weighs its elements, ``tl.dot`` 2·M·N·K, a reduction its input's
    elements; loops multiply by their trip count (from known bounds; 1 where unknown), an
    ``if`` on an unknown condition counts the cheaper branch, and a ``return`` under a
    condition read from memory ends the count (an index guard does not); ``@triton.jit``
    helpers are followed, block pointers and tensor descriptors read as their block shape.
    A grid larger than its tensors is credited only for the programs they can feed
    (``useful_programs``). Work is counted only when its result is stored (each op once, however often
    it is stored): arithmetic on indices and pointers (a gather's ``idx * stride``) and
    values that only feed masks or addresses earn nothing. Arithmetic by an identity
    constant (``x * 1.0``, ``x + 0``) earns nothing. A kernel that only loads and stores
    earns no compute work (``moved`` counts the elements it stored from memory: credit only
    where the reference itself only moves data).
  * CUDA (``load_inline``): ``cuda_computes`` reads each ``__global__`` body: arithmetic on
    a value read through a pointer parameter (outside subscripts) is compute. Its work is
    not estimated (the worker sees no grid): on a GPU the time coverage decides, and a
    CUDA kernel that only moves data earns nothing where the reference computes.

Does not cover: which kernels are the candidate's (``profile.is_custom``), the torch side
(``opwork.py``), trust in the recorded launches (the worker's; the GPU's activity records
cap their counts, judge.py). Limits: pointless arithmetic on loaded values (``x * s`` with
``s`` an argument equal to 1, a loop that recomputes) earns work; the judge caps a call's
custom work at the reference's work, and on a GPU the kernel's real time bounds it too.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from typing import Optional

from ...pysource import parse as parse_source

MAX_DEPTH = 8  # nested @triton.jit helper calls followed
_UNKNOWN_LOOP = 1  # trip count of a loop whose bounds are not known


def _jit(dec: ast.AST) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    name = _dotted(target)
    return name.split(".")[-1] in ("jit", "autotune", "heuristics")


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def analyze(source: str) -> dict:
    """The candidate's kernels: ``{"triton": {name: FunctionDef}, "cuda": {name: computes}}``
    (empty where the source does not parse)."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return {"triton": {}, "cuda": {}}
    triton = {n.name: n for n in ast.walk(tree)
              if isinstance(n, ast.FunctionDef) and any(_jit(d) for d in n.decorator_list)}
    cuda: dict[str, bool] = {}
    for c in ast.walk(tree):
        if isinstance(c, ast.Constant) and isinstance(c.value, str) and "__global__" in c.value:
            cuda.update(cuda_computes(c.value))
    return {"triton": triton, "cuda": cuda}


# --------------------------------------------------------------------------- abstract values
@dataclass
class V:
    """An abstract value: a tensor's shape (``()`` a scalar, None unknown), a known Python
    value, whether it holds data read from memory (``data``: 1 loaded, 2 computed from
    loaded values), whether it is an address, and the ops (id → work) that made it."""
    shape: Optional[tuple] = ()
    const: object = None
    data: int = 0
    ptr: bool = False
    ops: dict = field(default_factory=dict)


def _numel(shape) -> int:
    return math.prod(d for d in shape if isinstance(d, int) and d > 0) if shape else 1


def _bcast(*shapes):
    if any(s is None for s in shapes):
        return None
    out: list = []
    for i in range(1, max((len(s) for s in shapes), default=0) + 1):
        dims = {s[-i] for s in shapes if len(s) >= i} - {1}
        out.append(max(dims) if dims else 1)
    return tuple(reversed(out))


class _Launch:
    """One launch's abstract run: counters over every program (``programs`` x per program)."""

    def __init__(self, funcs: dict, programs: int):
        self.funcs, self.programs = funcs, max(1, int(programs))
        self.mult = 1.0  # trip counts of the loops around the current statement
        self.counted: set = set()
        self.work = 0.0  # per program
        self.moved = 0.0
        self.stored = 0.0  # elements stored, per program
        self.next_id = 0

    # ops --------------------------------------------------------------
    def op(self, work: float, *parts: V, shape=(), data: int = 2) -> V:
        ops: dict = {}
        for p in parts:
            ops.update(p.ops)
        self.next_id += 1
        ops[self.next_id] = work * self.mult
        return V(shape=shape, data=data, ops=ops)

    def store(self, value: V, elems: int) -> None:
        self.stored += elems * self.mult
        if value.data == 1:
            self.moved += elems * self.mult
        for k, w in value.ops.items():
            if k not in self.counted:
                self.counted.add(k)
                self.work += w

    # statements -------------------------------------------------------
    def run(self, fn: ast.FunctionDef, env: dict, depth: int = 0) -> V:
        ret: list = []
        self.block(fn.body, env, ret, depth)
        return ret[0] if ret else V()

    def block(self, body, env: dict, ret: list, depth: int) -> None:
        for st in body:
            if ret:
                return
            self.stmt(st, env, ret, depth)

    def stmt(self, st, env: dict, ret: list, depth: int) -> None:
        if isinstance(st, ast.Assign):
            v = self.expr(st.value, env, depth)
            for t in st.targets:
                self.bind(t, v, env)
        elif isinstance(st, ast.AnnAssign) and st.value is not None:
            self.bind(st.target, self.expr(st.value, env, depth), env)
        elif isinstance(st, ast.AugAssign):
            v = self.binop(st.op, self.expr(st.target, env, depth), self.expr(st.value, env, depth))
            self.bind(st.target, v, env)
        elif isinstance(st, ast.Expr):
            self.expr(st.value, env, depth)
        elif isinstance(st, ast.Return):
            ret.append(self.expr(st.value, env, depth) if st.value is not None else V())
        elif isinstance(st, (ast.For, ast.While)):
            self.loop(st, env, ret, depth)
        elif isinstance(st, ast.If):
            self.branch(st, env, ret, depth)
        elif isinstance(st, ast.With):
            self.block(st.body, env, ret, depth)

    def loop(self, st, env: dict, ret: list, depth: int) -> None:
        trips = _UNKNOWN_LOOP
        if isinstance(st, ast.For):
            it = st.iter
            if isinstance(it, ast.Call) and _dotted(it.func).split(".")[-1] in ("range", "static_range"):
                args = [self.expr(a, env, depth).const for a in it.args]
                if len(args) > 1 and args[0] is None:  # a start from the program id: a persistent loop
                    args[0] = 0
                if args and all(isinstance(a, int) and not isinstance(a, bool) for a in args):
                    lo, hi, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) > 2 else 1)
                    trips = max(0, len(range(lo, hi, step or 1)))
            self.bind(st.target, V(), env)
        saved = self.mult
        self.mult *= trips
        try:
            self.block(st.body, env, ret, depth)
        finally:
            self.mult = saved

    def branch(self, st: ast.If, env: dict, ret: list, depth: int) -> None:
        """A known condition takes its branch; an unknown one counts the cheaper branch. A
        branch that returns on a condition read from memory ends the kernel there (the
        cheaper path: the rest counts nothing); one that returns on an index condition (a
        program past the end) lets the rest count."""
        test = self.expr(st.test, env, depth)
        if test.const is not None and test.data == 0:
            self.block(st.body if test.const else st.orelse, env, ret, depth)
            return
        work, moved, counted = self.work, self.moved, set(self.counted)
        env_a, env_b = dict(env), dict(env)
        ret_a: list = []
        ret_b: list = []
        self.block(st.body, env_a, ret_a, depth)
        wa, ma = self.work - work, self.moved - moved
        self.work, self.moved, self.counted = work, moved, counted
        self.block(st.orelse, env_b, ret_b, depth)
        wb, mb = self.work - work, self.moved - moved
        self.work, self.moved = work + min(wa, wb), moved + min(ma, mb)  # the cheaper branch
        env.update(env_a)
        env.update(env_b)
        if (ret_a or ret_b) and test.data:
            ret.append(V())

    def bind(self, target, v: V, env: dict) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = v
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = v.const if isinstance(v.const, tuple) and len(v.const) == len(target.elts) else None
            for i, t in enumerate(target.elts):
                self.bind(t, V(const=items[i]) if items else V(shape=v.shape, data=v.data, ops=dict(v.ops)), env)

    # expressions ------------------------------------------------------
    def expr(self, e, env: dict, depth: int) -> V:
        if isinstance(e, ast.Constant):
            return V(const=e.value)
        if isinstance(e, ast.Name):
            return env.get(e.id, V())
        if isinstance(e, (ast.Tuple, ast.List)):
            items = [self.expr(x, env, depth) for x in e.elts]
            return V(const=tuple(i.const for i in items))
        if isinstance(e, ast.BinOp):
            return self.binop(e.op, self.expr(e.left, env, depth), self.expr(e.right, env, depth))
        if isinstance(e, ast.BoolOp):
            vals = [self.expr(x, env, depth) for x in e.values]
            return self.elementwise(vals, 1.0)
        if isinstance(e, ast.UnaryOp):
            v = self.expr(e.operand, env, depth)
            if v.const is not None and v.data == 0:
                try:
                    return V(const={ast.USub: lambda x: -x, ast.UAdd: lambda x: x, ast.Not: lambda x: not x,
                                    ast.Invert: lambda x: ~x}[type(e.op)](v.const))
                except (KeyError, TypeError):
                    return V()
            return self.elementwise([v], 0.0 if isinstance(e.op, ast.UAdd) else 1.0)
        if isinstance(e, ast.Compare):
            vals = [self.expr(e.left, env, depth)] + [self.expr(c, env, depth) for c in e.comparators]
            if all(v.const is not None and v.data == 0 for v in vals) and len(vals) == 2:
                try:
                    return V(const=_compare(e.ops[0], vals[0].const, vals[1].const))
                except TypeError:
                    return V()
            return self.elementwise(vals, 1.0)
        if isinstance(e, ast.IfExp):
            c = self.expr(e.test, env, depth).const
            if c is not None:
                return self.expr(e.body if c else e.orelse, env, depth)
            return self.elementwise([self.expr(e.body, env, depth), self.expr(e.orelse, env, depth)], 0.0)
        if isinstance(e, ast.Subscript):
            return self.subscript(self.expr(e.value, env, depth), e.slice)
        if isinstance(e, ast.Attribute):
            base = self.expr(e.value, env, depth)
            if e.attr == "T" and base.shape:
                return V(shape=tuple(reversed(base.shape)), data=base.data, ptr=base.ptr, ops=dict(base.ops))
            return V()
        if isinstance(e, ast.Call):
            return self.call(e, env, depth)
        return V()

    def binop(self, op, a: V, b: V) -> V:
        if a.const is not None and b.const is not None and a.data == 0 and b.data == 0 and not (a.ptr or b.ptr):
            try:
                return V(const=_arith(op, a.const, b.const))
            except (TypeError, ValueError, ZeroDivisionError, OverflowError, KeyError):
                return V()
        shape = _bcast(a.shape, b.shape)
        if a.ptr or b.ptr:  # address arithmetic: an index, whatever it was computed from
            return V(shape=shape, ptr=True)
        if _identity(op, a, b):
            data = a if a.data else b
            return V(shape=shape, data=data.data, ops=dict(data.ops))
        return self.elementwise([a, b], 1.0)

    def elementwise(self, vals: list, weight: float) -> V:
        """An elementwise op: work where it reads memory's data, else an index."""
        shape = _bcast(*[v.shape for v in vals])
        if any(v.ptr for v in vals):
            return V(shape=shape, ptr=True)
        if not any(v.data for v in vals):
            return V(shape=shape)
        if weight == 0.0:  # a select or a plain pass: data moves on, no op
            ops: dict = {}
            for v in vals:
                ops.update(v.ops)
            return V(shape=shape, data=max(v.data for v in vals), ops=ops)
        return self.op(weight * _numel(shape), *vals, shape=shape)

    def subscript(self, v: V, sl) -> V:
        items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        if v.shape is None or isinstance(v.const, tuple):
            if isinstance(v.const, tuple) and isinstance(sl, ast.Constant) and isinstance(sl.value, int):
                try:
                    return V(const=v.const[sl.value])
                except IndexError:
                    return V()
            return V(shape=None if v.shape is None else (), data=v.data, ptr=v.ptr, ops=dict(v.ops))
        dims, shape = list(v.shape), []
        for it in items:
            if isinstance(it, ast.Constant) and it.value is None:
                shape.append(1)
            elif isinstance(it, ast.Slice) and dims:
                shape.append(dims.pop(0))
            elif dims:
                dims.pop(0)
        return V(shape=tuple(shape + dims), data=v.data, ptr=v.ptr, ops=dict(v.ops))

    def call(self, e: ast.Call, env: dict, depth: int) -> V:
        name = _dotted(e.func)
        last = name.split(".")[-1]
        if isinstance(e.func, ast.Attribute) and _is_method(e.func, env):  # x.to(...), tl.load(p).to(...)
            return self.method(self.expr(e.func.value, env, depth), last, e, env, depth)
        args = [self.expr(a, env, depth) for a in e.args]
        kw = {k.arg: self.expr(k.value, env, depth) for k in e.keywords if k.arg}
        if last in self.funcs and depth < MAX_DEPTH and "." not in name:
            return self.helper(self.funcs[last], args, kw, depth)
        if last == "program_id":
            return V()
        if last == "num_programs":  # the whole grid (exact for a 1-D one)
            return V(const=self.programs)
        if last in ("make_block_ptr", "make_tensor_descriptor"):  # a tile's address: its block shape
            blk = (kw.get("block_shape") or (args[4] if last == "make_block_ptr" and len(args) > 4 else
                                            args[3] if len(args) > 3 else V())).const
            ok = isinstance(blk, tuple) and all(isinstance(d, int) for d in blk)
            return V(shape=tuple(blk) if ok else None, ptr=True)
        if last in ("load_tensor_descriptor", "_experimental_descriptor_load") and args:
            return V(shape=args[0].shape, data=1)
        if last in ("store_tensor_descriptor", "_experimental_descriptor_store") and len(args) >= 3:
            self.store(args[2], _numel(args[2].shape))
            return V()
        if last == "arange" and len(args) >= 2 and all(isinstance(a.const, int) for a in args[:2]):
            return V(shape=(args[1].const - args[0].const,))
        if last in ("zeros", "full", "zeros_like", "full_like", "ones", "rand", "randn", "randint"):
            shp = (args[0] if args else kw.get("shape", V())).const
            if last.endswith("_like") and args:
                return V(shape=args[0].shape)
            return V(shape=tuple(shp) if isinstance(shp, tuple) and all(isinstance(d, int) for d in shp) else
                     ((shp,) if isinstance(shp, int) else None))
        if last == "load" and args:
            return V(shape=args[0].shape, data=1)
        if last == "store" and len(args) >= 2:
            self.store(args[1], _numel(_bcast(args[0].shape, args[1].shape)))
            return V()
        if last in ("atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_and", "atomic_or",
                    "atomic_xor", "atomic_cas") and len(args) >= 2:
            val = args[1] if last != "atomic_cas" or len(args) < 3 else args[2]
            v = self.op(_numel(_bcast(args[0].shape, val.shape)), val, shape=val.shape) if val.data else val
            self.store(v, _numel(val.shape))
            return V(shape=args[0].shape, data=1)
        if last == "dot" and len(args) >= 2:
            return self.dot(args[0], args[1], args[2] if len(args) > 2 else kw.get("acc"))
        if last in _REDUCTIONS and args:
            axis = (args[1] if len(args) > 1 else kw.get("axis", V())).const
            return self.reduce(args[0], axis, bool((kw.get("keep_dims") or V()).const))
        if last == "cdiv" and len(args) == 2 and all(isinstance(a.const, int) for a in args) and args[1].const:
            return V(const=-(-args[0].const // args[1].const))
        if last in ("min", "max", "minimum", "maximum") and args and all(
                a.const is not None and a.data == 0 for a in args) and len(args) == 2:
            try:
                return V(const=(min if last.startswith("min") else max)(args[0].const, args[1].const))
            except TypeError:
                return V()
        if last in _SHAPE_OPS:
            return self.reshape(last, args, kw)
        if last in _PASS or last in ("constexpr", "cast", "to", "static_assert", "device_assert", "debug_barrier",
                                     "static_print", "device_print", "assume", "int32", "float32"):
            return args[0] if args and last not in ("static_assert", "device_assert", "static_print",
                                                    "device_print", "debug_barrier", "assume") else V()
        if (last == "where" and len(args) == 3) or last in _MOVES:
            return self.elementwise(args, 0.0)
        return self.elementwise(args + list(kw.values()), 1.0)  # math (exp, sqrt, maximum, ...): each element

    def method(self, v: V, last: str, e: ast.Call, env: dict, depth: int) -> V:
        args = [self.expr(a, env, depth) for a in e.args]
        kw = {k.arg: self.expr(k.value, env, depth) for k in e.keywords if k.arg}
        if last in ("to", "cast"):
            return V(shape=v.shape, data=v.data, ptr=v.ptr, ops=dict(v.ops))
        if v.ptr and last == "load":  # a tensor descriptor's tile
            return V(shape=v.shape, data=1)
        if v.ptr and last == "store" and len(args) >= 2:
            self.store(args[1], _numel(args[1].shape))
            return V()
        if v.ptr:  # any other method of an address (advance, ...): still an address
            return V(shape=v.shape, ptr=True)
        if last in _REDUCTIONS:
            axis = (args[0] if args else kw.get("axis", V())).const
            return self.reduce(v, axis, bool((kw.get("keep_dims") or V()).const))
        if last in _SHAPE_OPS:
            return self.reshape(last, [v] + args, kw)
        return self.elementwise([v] + args, 1.0)

    def helper(self, fn: ast.FunctionDef, args: list, kw: dict, depth: int) -> V:
        env = _defaults(fn)
        names = [a.arg for a in fn.args.args]
        for n, v in zip(names, args):
            env[n] = v
        env.update({k: v for k, v in kw.items() if k in names})
        return self.run(fn, env, depth + 1)

    def dot(self, a: V, b: V, acc: Optional[V]) -> V:
        if a.shape is None or b.shape is None or len(a.shape) < 2 or len(b.shape) < 2:
            shape, work = None, 0.0
        else:
            shape = tuple(a.shape[:-1]) + (b.shape[-1],)
            work = 2.0 * _numel(a.shape) * b.shape[-1]
        parts = [a, b] + ([acc] if acc is not None else [])
        if not (a.data or b.data):
            return V(shape=shape)
        return self.op(work, *parts, shape=shape)

    def reduce(self, v: V, axis, keep: bool) -> V:
        if v.shape is None:
            shape = None
        elif isinstance(axis, int) and v.shape:
            ax = axis % len(v.shape)
            shape = tuple(1 if i == ax else d for i, d in enumerate(v.shape)) if keep else \
                tuple(d for i, d in enumerate(v.shape) if i != ax)
        else:
            shape = ()
        if v.ptr or not v.data:
            return V(shape=shape)
        return self.op(float(_numel(v.shape)), v, shape=shape)

    def reshape(self, last: str, args: list, kw: dict) -> V:
        if not args:
            return V()
        v = args[0]
        shape = v.shape
        if last in ("reshape", "view") and len(args) > 1:
            dims = args[1].const if len(args) == 2 else tuple(a.const for a in args[1:])
            shape = tuple(dims) if isinstance(dims, tuple) and all(isinstance(d, int) for d in dims) else None
        elif last in ("trans", "permute") and shape:
            shape = tuple(reversed(shape))
        elif last == "expand_dims" and shape is not None and len(args) > 1 and isinstance(args[1].const, int):
            s = list(shape)
            s.insert(args[1].const % (len(s) + 1), 1)
            shape = tuple(s)
        elif last == "broadcast_to" and len(args) > 1 and isinstance(args[1].const, tuple):
            shape = tuple(args[1].const)
        elif last == "broadcast" and len(args) > 1:
            shape = _bcast(shape, args[1].shape)
        return V(shape=shape, data=v.data, ptr=v.ptr, ops=dict(v.ops))


_REDUCTIONS = {"sum", "max", "min", "argmax", "argmin", "reduce", "xor_sum", "cumsum", "cumprod", "associative_scan",
               "softmax", "sort", "histogram", "prod"}
_SHAPE_OPS = {"reshape", "view", "trans", "permute", "expand_dims", "broadcast_to", "broadcast", "ravel"}
_MOVES = {"join", "interleave", "flip", "split", "gather", "cat", "permute_data"}  # data moved, no op
_PASS = {"multiple_of", "max_contiguous", "max_constancy", "advance"}


def _is_method(func: ast.Attribute, env: dict) -> bool:
    """Whether ``a.b(...)`` calls a method of a value (``x.to``, ``tl.load(p).to``) rather than
    a module's function (``tl.exp``, ``tl.math.exp``): the chain's root is a value (a name the
    kernel bound, or a call's or subscript's result)."""
    node = func.value
    while isinstance(node, ast.Attribute):
        node = node.value
    return not isinstance(node, ast.Name) or node.id in env


def _identity(op, a: V, b: V) -> bool:
    """``x * 1``, ``1 * x``, ``x + 0``, ``0 + x``, ``x - 0``, ``x / 1``, ``x ** 1``: no work."""
    for x, c, right in ((a, b, True), (b, a, False)):
        if x.data and c.data == 0 and isinstance(c.const, (int, float)) and not isinstance(c.const, bool):
            k = c.const
            if (isinstance(op, ast.Mult) and k == 1) or (isinstance(op, ast.Add) and k == 0):
                return True
            if right and ((isinstance(op, ast.Sub) and k == 0) or (isinstance(op, (ast.Div, ast.FloorDiv, ast.Pow))
                                                                     and k == 1)):
                return True
    return False


def _arith(op, a, b):
    return {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b, ast.Div: lambda: a / b,
            ast.FloorDiv: lambda: a // b, ast.Mod: lambda: a % b, ast.Pow: lambda: a ** b if abs(b) < 64 else None,
            ast.LShift: lambda: a << b if 0 <= b < 64 else None, ast.RShift: lambda: a >> b,
            ast.BitAnd: lambda: a & b, ast.BitOr: lambda: a | b, ast.BitXor: lambda: a ^ b}[type(op)]()


def _compare(op, a, b):
    return {ast.Lt: a < b, ast.LtE: a <= b, ast.Gt: a > b, ast.GtE: a >= b, ast.Eq: a == b,
            ast.NotEq: a != b}.get(type(op))


def _defaults(fn: ast.FunctionDef) -> dict:
    args = fn.args.args
    out = {}
    for a, d in zip(args[len(args) - len(fn.args.defaults):], fn.args.defaults):
        if isinstance(d, ast.Constant):
            out[a.arg] = V(const=d.value)
    return out


def launch_work(facts: dict, name: str, programs: int, args: dict) -> tuple[float, float]:
    """(compute work, elements moved) of one launch of Triton kernel ``name``: ``programs``
    program instances, ``args`` the recorded arguments by parameter name (a number, or
    ``["t", numel]`` for a tensor). (0, 0) for a kernel the source does not define."""
    funcs = facts.get("triton") or {}
    fn = funcs.get(name)
    if fn is None:
        return 0.0, 0.0
    env = _defaults(fn)
    for pname, val in (args or {}).items():
        if isinstance(val, list) and len(val) == 2 and val[0] == "t":
            env[pname] = V(shape=(), ptr=True)
        elif isinstance(val, (int, float, bool)):
            env[pname] = V(const=val)
    for a in fn.args.args:  # parameters not recorded: pointers by name, else unknown scalars
        env.setdefault(a.arg, V(ptr=a.arg.endswith("ptr")))
    run = _Launch(funcs, programs)
    try:
        run.run(fn, env)
    except RecursionError:
        return 0.0, 0.0
    programs = useful_programs(run.programs, args, run.stored)
    return run.work * programs, run.moved * programs


def useful_programs(programs: int, args: dict, stored: float) -> int:
    """Programs that can do distinct work: no more than ``SPREAD`` times the elements of the
    launch's tensors over what one program stores (a grid far larger than its tensors
    does masked-off work: not credited)."""
    sizes = [v[1] for v in (args or {}).values() if isinstance(v, list) and len(v) == 2 and v[0] == "t"
             and isinstance(v[1], int)]
    if not sizes or stored <= 0:
        return programs
    return max(1, min(programs, math.ceil(SPREAD * sum(sizes) / stored)))


SPREAD = 4  # a program's stores may overlap others' (split-K partial sums) this many times


# --------------------------------------------------------------------------- CUDA sources
_GLOBAL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?[\w:<>\s\*&]*?\b(\w+)\s*\(([^)]*)\)\s*\{")
_ARITH = re.compile(r"[-+*/%^|&]|<<|>>|\b(?:exp|expf|log|logf|sqrt|sqrtf|rsqrt|rsqrtf|fmax|fmaxf|fmin|fminf|tanh|"
                    r"tanhf|pow|powf|fabs|fabsf|max|min|abs|fma|fmaf|__(?!ld)\w+)\s*\(|[<>]=?|\?")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def cuda_computes(source: str) -> dict[str, bool]:
    """Each ``__global__`` kernel of a CUDA source → whether it does arithmetic on values it
    read through its pointer parameters (index arithmetic inside ``[...]`` does not count)."""
    out = {}
    for m in _GLOBAL.finditer(source):
        name, params = m.group(1), m.group(2)
        ptrs = {p.strip().split()[-1].lstrip("*&") for p in params.split(",") if "*" in p and p.strip()}
        body = _braced(source, m.end() - 1)
        out[name] = _body_computes(body, ptrs)
    return out


def _braced(s: str, start: int) -> str:
    depth = 0
    for i in range(start, len(s)):
        depth += {"{": 1, "}": -1}.get(s[i], 0)
        if depth == 0:
            return s[start + 1:i]
    return s[start + 1:]


def _strip_subscripts(stmt: str) -> str:
    out, depth = [], 0
    for ch in stmt:
        if ch == "[":
            depth += 1
            out.append("[")
        elif ch == "]":
            depth = max(0, depth - 1)
            out.append("]")
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _body_computes(body: str, ptrs: set) -> bool:
    body = re.sub(r"//[^\n]*|/\*.*?\*/", " ", body, flags=re.S)
    tainted = set(ptrs)  # names whose value came from memory (pointer parameters read by subscript)
    for _ in range(2):  # twice: a value read late may flow into an earlier loop's statement
        for raw in re.split(r"[;{}]", body):
            stmt = _strip_subscripts(raw)
            if "=" not in stmt or stmt.strip().startswith(("for", "if", "while")) and "=" not in stmt.split(")")[-1]:
                continue
            lhs, _, rhs = stmt.partition("=")
            if rhs.startswith("=") or lhs.endswith(("<", ">", "!")):
                continue
            if "*" in lhs.strip().lstrip("*"):  # a pointer declared from another: address arithmetic
                tainted.update(_IDENT.findall(lhs)[-1:])
                continue
            reads = {w for w in _IDENT.findall(rhs)} & tainted
            if not reads:
                continue
            expr = re.sub(r"([(,]\s*|^\s*)&(?=\s*\w)", r"\1", rhs.replace("[]", ""))  # address-of is no op
            if _ARITH.search(expr) or lhs.rstrip()[-1:] in "+-*/%^|&":
                return True
            target = _IDENT.findall(lhs)
            if target and "[" not in lhs:
                tainted.add(target[-1])
            elif target:  # a store into an array (shared memory, a local tile): its values came from memory
                tainted.add(lhs.split("[", 1)[0].split()[-1].lstrip("*&") if lhs.split("[", 1)[0].split() else target[0])
    return False


# --------------------------------------------------------------------------- one call's custom work
_BIG = 2 ** 48  # launch figures beyond this are not believed (clamped)


def _clean_args(args) -> dict:
    out = {}
    for k, v in (args.items() if isinstance(args, dict) else ()):
        if not isinstance(k, str):
            continue
        if isinstance(v, bool):
            out[k] = v
        elif isinstance(v, int):
            out[k] = max(-_BIG, min(_BIG, v))
        elif isinstance(v, float) and v == v and abs(v) < _BIG:
            out[k] = v
        elif isinstance(v, list) and len(v) == 2 and v[0] == "t" and isinstance(v[1], int) \
                and not isinstance(v[1], bool):
            out[k] = ["t", max(0, min(_BIG, v[1]))]
    return out


def custom_work(kinds, facts: dict, moves: bool, seen: Optional[dict] = None, cap: int = 32) -> Optional[float]:
    """The work one call's custom kernels did: each recorded launch (``kinds``: the worker's
    [name, programs, args, launches] rows, untrusted) weighed by ``launch_work``, with the
    elements copy kernels moved added only where the reference only moves data (``moves``).
    ``seen``: the custom launches per kernel name the GPU's activity records show for the
    call; a kernel recorded more often than it ran is weighed by the runs. A CUDA kernel
    that computes (``cuda_computes``) makes the figure unknown (None): its work is not
    estimated. None also where the worker recorded no launches at all (no audit)."""
    if not isinstance(kinds, list):
        return None
    cuda = facts.get("cuda") or {}
    if any(cuda.values()) and (seen is None or any(cuda.get(n) for n in seen)):
        return None  # a CUDA kernel that computes may have run: its work is not estimated
    per_name: dict[str, float] = {}
    launches: dict[str, int] = {}
    for row in kinds[:cap]:
        if not (isinstance(row, list) and len(row) == 4 and isinstance(row[0], str)):
            continue
        name, programs, args, n = row
        programs = max(1, min(_BIG, programs)) if isinstance(programs, int) and not isinstance(programs, bool) else 1
        n = max(0, min(_BIG, n)) if isinstance(n, int) and not isinstance(n, bool) else 0
        try:
            w, m = launch_work(facts, name, programs, _clean_args(args))
        except Exception:  # noqa: BLE001 - a kernel this reading does not follow earns nothing
            w, m = 0.0, 0.0
        per_name[name] = per_name.get(name, 0.0) + (w + (m if moves else 0.0)) * n
        launches[name] = launches.get(name, 0) + n
    if seen is not None:
        for name, n in launches.items():
            ran = float(seen.get(name, 0.0) or 0.0)
            if n > ran:
                per_name[name] *= ran / n if n else 0.0
    return sum(per_name.values())
