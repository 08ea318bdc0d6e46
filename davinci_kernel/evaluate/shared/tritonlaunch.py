"""The work one launch of a Triton kernel does, by abstract interpretation of its Python AST.

Covers ``launch_work`` and ``launch_detail``: for one launch (the launch grid and the
arguments the worker's launch wrapper recorded: integers, constexprs, tensor sizes; a
parameter passed but not recordable is unknown, never its source default) it interprets the
kernel's body over abstract values (``tritonvalues.V``) and counts, per program, the work
that reaches memory: each arithmetic op, comparison or math call on values loaded from
memory weighs its elements, ``tl.dot`` 2·M·N·K, a reduction its input's elements; loops
multiply by their trip count (from known bounds; 1 where unknown) the ops on values that
vary from one trip to the next; an op on values that do not vary in a loop (a recomputed
unchanged value) counts once. An ``if`` on a condition read from memory counts the cheaper
branch; one on an index condition (program ids, aranges, arguments: a guard) counts the
larger; a ``return`` under a condition read from memory ends the count (an index guard does
not); ``@triton.jit`` helpers are followed, block pointers and tensor descriptors read as
their block shape. A grid larger than its tensors is credited only for the programs they can
feed (``useful_programs``), and a store only for the lanes that can land on distinct elements
of its tensor (``_Launch.lanes_landing``: a block far larger than its tensor is masked off).

Work is counted only when its result is stored (each op once, however often it is stored),
and only the ops on the stored value's dependency path: arithmetic on indices and pointers (a
gather's ``idx * stride``) and values that only feed masks or addresses earn nothing. A chain
of multiplies and adds by invariant coefficients (constants, or values that do not vary in
the loop around them) is one affine map: it costs at most a multiply and an add per element,
however long the chain or the loop that repeats it (``x = x * 2.0; x = x * 0.5`` looped K
times), nothing where it composes to the identity (``x * 1.0``, ``x * 2 * 0.5``, ``x + 1 -
1``), and a value multiplied by zero no longer depends on what made it. With ``reach`` (the
share of each tensor parameter's bytes that reaches the call's output, ``kernelwork``) only
stores into reaching tensors are credited, and ``LaunchWork.reads`` names the tensors those
stored values were read from. A kernel that only loads and stores earns no compute work
(``moved`` counts the elements it stored from memory: credit only where the reference
itself only moves data).

Does not cover finding the kernels in a source (``tritonjit.py``), CUDA kernels
(``cudawork.py``), nor summing a call's launches (``kernelwork.custom_work``). Limits:
cancellation between loaded values (``(y + s) - s``) and arithmetic by a loaded value that
happens to be 1 still earn their ops; the judge caps each launch's credited work at the
reference's work per output element times the elements it stored into reaching tensors.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, replace
from typing import Optional

from .tritonjit import dotted
from .tritonvalues import (
    V,
    arith,
    bcast,
    compare,
    identity,
    numel,
    poly_add,
    poly_constant,
    poly_div,
    poly_key,
    poly_mul,
    poly_single,
    range_arith,
    range_compare,
    spread,
    value_range,
)

MAX_DEPTH = 8  # nested @triton.jit helper calls followed
_UNKNOWN_LOOP = 1  # trip count of a loop whose bounds are not known
_EPS = 1e-6  # an affine chain this close to the identity is the identity


class _Launch:
    """One launch's abstract run: counters over every program (``programs`` x per program).
    ``reach``: tensor parameter → share of its bytes that reaches the output (None: every
    store is credited)."""

    def __init__(self, funcs: dict, programs: int, reach: Optional[dict] = None, consts: Optional[dict] = None,
                 sizes: Optional[dict] = None, credited: Optional[int] = None):
        self.funcs, self.programs, self.reach = funcs, max(1, int(programs)), reach
        self.sizes = sizes or {}  # tensor parameter → its elements (recorded); absent: unknown
        self.credited = max(1, int(credited or programs))  # the programs credited (``useful_programs``)
        self.consts = consts or {}  # tensor parameter → the constant every element holds
        self.stored_const: set = set()  # those it stores into: their values are not constant
        self.mult = 1.0  # trip counts of the loops around the current statement
        self.counted: dict = {}  # op id → share already credited
        self.work = 0.0  # per program
        self.moved = 0.0
        self.stored = 0.0  # elements stored, per program
        self.reached = 0.0  # distinct elements stored into reaching tensors, per program (weighed by reach)
        self.reads: set = set()  # tensor parameters read by the credited stores
        self.wrote: set = set()  # tensor parameters the credited stores went into
        self.next_id = 0
        self.terms: dict = {}  # term id → the value it stands for (``poly``)
        self.term_of: dict = {}  # a polynomial's key → the term id of a value equal to it

    def at(self, born: float) -> float:
        """The trips an op runs that was made from values varying at ``born``."""
        return min(self.mult, max(1.0, born))  # 0 inside a loop of no trips

    def state(self) -> tuple:
        return self.work, self.moved, self.stored, self.reached, dict(self.counted), set(self.reads), set(self.wrote)

    def restore(self, st: tuple) -> None:
        self.work, self.moved, self.stored, self.reached, counted, reads, wrote = st
        self.counted, self.reads, self.wrote = dict(counted), set(reads), set(wrote)

    # ops --------------------------------------------------------------
    def op(self, work: float, *parts: V, shape=(), data: int = 2) -> V:
        ops: dict = {}
        src: frozenset = frozenset()
        for p in parts:
            ops.update(p.ops)
            src |= p.src
        born = max((p.born for p in parts), default=0.0)
        self.next_id += 1
        ops[self.next_id] = work * self.at(born)
        return V(shape=shape, data=data, ops=ops, src=src, born=born)

    def share(self, bases) -> float:
        if self.reach is None:
            return 1.0
        return max((float(self.reach.get(b, 0.0)) for b in bases), default=0.0)

    def lanes_landing(self, bases, lanes: float, atomic: bool) -> float:
        """The share of a store's ``lanes`` (per program, loops its address varies in included) that can land on
        distinct elements: over the credited programs a plain store writes at most the
        elements its tensor has, an atomic one ``SPREAD`` times that (programs adding into
        one element, split-K); the lanes beyond are masked off (a block far larger than its
        tensor) or rewrite one another. 1 where a tensor's size was not recorded."""
        sizes = [self.sizes.get(b) for b in bases]
        if not sizes or any(n is None for n in sizes) or lanes <= 0:
            return 1.0
        return min(1.0, (SPREAD if atomic else 1) * sum(sizes) / (lanes * self.credited))

    def store(self, value: V, elems: int, ptr: Optional[V] = None, mask: Optional[V] = None,
              atomic: bool = False) -> None:
        ptr, mask = ptr or V(), mask or V()
        self.stored_const |= ptr.bases & set(self.consts)
        self.stored += elems * self.mult
        lanes = elems * self.at(max(ptr.born, mask.born))  # an address that does not vary in a loop: once
        f = self.share(ptr.bases) * self.lanes_landing(ptr.bases, lanes, atomic)
        if f <= 0:
            return
        self.reached += lanes * f
        if value.data == 1:
            self.moved += elems * self.mult * f
        for k, w in value.ops.items():
            prev = self.counted.get(k, 0.0)
            if f > prev:
                self.counted[k] = f
                self.work += w * (f - prev)
        self.reads |= value.src | ptr.src | mask.src
        self.wrote |= ptr.bases

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
        """The body once, its ops weighed by the trips in which their values vary: the loop
        variable and the names the body assigns (carried values) vary; a carried value keeps
        its value before the loop as the root of an affine chain (``x = x * s`` repeated is
        one multiply by ``s`` to the trips)."""
        trips = _UNKNOWN_LOOP
        rng = None
        if isinstance(st, ast.For):
            it = st.iter
            if isinstance(it, ast.Call) and dotted(it.func).split(".")[-1] in ("range", "static_range"):
                args = [self.expr(a, env, depth).const for a in it.args]
                known = None not in args
                if len(args) > 1 and args[0] is None:  # a start from the program id: a persistent loop
                    args[0] = 0
                if args and all(isinstance(a, int) and not isinstance(a, bool) for a in args):
                    lo, hi, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) > 2 else 1)
                    trips = max(0, len(range(lo, hi, step or 1)))
                    if trips and step and known:
                        ends = (lo, lo + (trips - 1) * step)
                        rng = (min(ends), max(ends))
        counter = None
        if isinstance(st, ast.While):
            counted = self.while_trips(st, env, depth)
            if counted is not None:
                trips, rng, counter = counted
        saved = self.mult
        self.mult *= trips
        if isinstance(st, ast.For):
            self.bind(st.target, V(born=self.mult, rng=rng), env)
        for name in _assigned(st.body) & set(env):
            v = env[name]
            aff = v.aff if v.aff is not None else ((v, 1.0, 0.0, frozenset(), {}, v.born) if v.data else None)
            env[name] = replace(v, born=self.mult, aff=aff)
        if counter is not None:  # the counter of a counted ``while``: an index over its range
            env[counter] = V(born=self.mult, rng=rng)
        try:
            self.block(st.body, env, ret, depth)
        finally:
            self.mult = saved
            for name, v in list(env.items()):
                if isinstance(v, V) and v.born > saved:
                    aff = v.aff[:5] + (min(v.aff[5], saved),) if v.aff is not None else None
                    env[name] = replace(v, born=saved, aff=aff)

    def while_trips(self, st: ast.While, env: dict, depth: int) -> Optional[tuple]:
        """(trips, range of the counter, its name) of ``while i < bound:`` (or ``<=``) whose body steps
        ``i`` up by a known amount (``i += step`` or ``i = i + step``) and assigns it nowhere
        else, ``i`` and ``bound`` known before the loop; None otherwise (trips unknown)."""
        t = st.test
        if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], (ast.Lt, ast.LtE))
                and isinstance(t.left, ast.Name)):
            return None
        name = t.left.id
        start, bound = env.get(name, V()).const, self.expr(t.comparators[0], env, depth).const
        steps = []
        for node in ast.walk(ast.Module(body=st.body, type_ignores=[])):
            if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                steps.append(self.expr(node.value, env, depth).const if isinstance(node.op, ast.Add) else None)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(x, ast.Name) and x.id == name for tg in targets for x in ast.walk(tg)):
                    v = node.value
                    ok = isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add) and isinstance(v.left, ast.Name) \
                        and v.left.id == name
                    steps.append(self.expr(v.right, env, depth).const if ok else None)
        ints = [start, bound] + steps
        if len(steps) != 1 or not all(isinstance(x, int) and not isinstance(x, bool) for x in ints) or steps[0] <= 0:
            return None
        end = bound + 1 if isinstance(t.ops[0], ast.LtE) else bound
        trips = max(0, -(-(end - start) // steps[0]))
        return trips, ((start, start + (trips - 1) * steps[0]) if trips else None), name

    def branch(self, st: ast.If, env: dict, ret: list, depth: int) -> None:
        """A known condition takes its branch. An unknown one on data read from memory counts
        the cheaper branch; an index condition (program ids, aranges, arguments: a guard such
        as ``if row < n_rows:``) counts the larger. A branch that returns on a condition read
        from memory ends the kernel there (the cheaper path: the rest counts nothing); one
        that returns on an index condition (a program past the end) lets the rest count."""
        test = self.expr(st.test, env, depth)
        if test.const is not None and test.data == 0:
            self.block(st.body if test.const else st.orelse, env, ret, depth)
            return
        if test.data == 0 and not test.ptr and test.rng in ((0, 0), (1, 1)):  # an index condition decided
            self.block(st.body if test.rng == (1, 1) else st.orelse, env, ret, depth)
            return
        before = self.state()
        env_a, env_b = dict(env), dict(env)
        ret_a: list = []
        ret_b: list = []
        self.block(st.body, env_a, ret_a, depth)
        a = self.state()
        self.restore(before)
        self.block(st.orelse, env_b, ret_b, depth)
        b = self.state()
        larger = (a[0], a[1]) >= (b[0], b[1])
        take_a = larger if not test.data else not larger
        self.restore(a if take_a else b)
        env.update(env_b if take_a else env_a)
        env.update(env_a if take_a else env_b)  # the values of the branch counted
        if (ret_a or ret_b) and test.data:
            ret.append(V())

    def bind(self, target, v: V, env: dict) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = v
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = v.const if isinstance(v.const, tuple) and len(v.const) == len(target.elts) else None
            for i, t in enumerate(target.elts):
                self.bind(t, V(const=items[i]) if items else replace(v, ops=dict(v.ops), aff=None, term=0, poly=None),
                          env)

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
            if isinstance(e.op, ast.USub) and v.data:  # -x: a multiply by -1
                return self.binop(ast.Mult(), v, V(const=-1.0))
            return self.elementwise([v], 0.0 if isinstance(e.op, ast.UAdd) else 1.0)
        if isinstance(e, ast.Compare):
            vals = [self.expr(e.left, env, depth)] + [self.expr(c, env, depth) for c in e.comparators]
            if all(v.const is not None and v.data == 0 for v in vals) and len(vals) == 2:
                try:
                    return V(const=compare(e.ops[0], vals[0].const, vals[1].const))
                except TypeError:
                    return V()
            v = self.elementwise(vals, 1.0)
            if not v.ptr and not v.data:  # an index condition: decided where the ranges tell
                known = [range_compare(o, value_range(x), value_range(y))
                         for o, x, y in zip(e.ops, vals, vals[1:])]
                if all(k is True for k in known):
                    v = replace(v, rng=(1, 1))
                elif any(k is False for k in known):
                    v = replace(v, rng=(0, 0))
            return v
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
                return replace(base, shape=tuple(reversed(base.shape)), ops=dict(base.ops), aff=None, term=0,
                               poly=None)
            return V()
        if isinstance(e, ast.Call):
            return self.call(e, env, depth)
        return V()

    def binop(self, op, a: V, b: V) -> V:
        if isinstance(op, ast.MatMult):  # ``a @ b`` on blocks is ``tl.dot(a, b)``
            return self.dot(a, b, None)
        if a.const is not None and b.const is not None and a.data == 0 and b.data == 0 and not (a.ptr or b.ptr):
            try:
                return V(const=arith(op, a.const, b.const))
            except (TypeError, ValueError, ZeroDivisionError, OverflowError, KeyError):
                return V()
        shape = bcast(a.shape, b.shape)
        if a.ptr or b.ptr:  # address arithmetic: an index, whatever it was computed from
            return V(shape=shape, ptr=True, bases=a.bases | b.bases, src=a.src | b.src, born=max(a.born, b.born))
        if identity(op, a, b):
            data = a if a.data else b
            return replace(data, shape=shape, ops=dict(data.ops), born=max(a.born, b.born))
        p = self.polynomial(op, a, b) if (a.data or b.data) else None
        if p is not None:
            c, t = poly_constant(p), poly_single(p)
            if c is not None:  # ``s - s``: a number, whatever was loaded
                return V(shape=shape, const=c, born=max(a.born, b.born))
            if t is not None and t in self.terms:  # ``(y + s) - s``: the value it started from
                base = self.terms[t]
                return replace(base, shape=bcast(base.shape, shape), ops=dict(base.ops))
        v = self.affine(op, a, b, shape)
        v = v if v is not None else self.elementwise([a, b], 1.0)
        if not v.ptr and not v.data:
            v = replace(v, rng=range_arith(op, value_range(a), value_range(b)))
        elif p is not None and v.data:
            v = replace(v, poly=p)
        return v

    def term(self, v: V) -> int:
        """The opaque term standing for ``v`` (values equal as polynomials share one)."""
        if v.poly is not None:
            key = poly_key(v.poly)
            if key in self.term_of:
                return self.term_of[key]
        if not v.term:
            self.next_id += 1
            v.term = self.next_id
            self.terms[v.term] = v
            if v.poly is not None:
                self.term_of[poly_key(v.poly)] = v.term
        return v.term

    def as_sum(self, v: V) -> Optional[dict]:
        """``v`` as a polynomial for adding: its own, a number's, or its term alone."""
        if v.ptr:
            return None
        if not v.data:
            k = v.const
            return {(): float(k)} if isinstance(k, (int, float)) and not isinstance(k, bool) else None
        return v.poly if v.poly is not None else {((self.term(v), 1),): 1.0}

    def as_factor(self, v: V) -> Optional[dict]:
        """``v`` as a factor: one monomial (a sum of several is a term of its own)."""
        p = self.as_sum(v)
        if p is None or len(p) <= 1:
            return p
        return {((self.term(v), 1),): 1.0}

    def polynomial(self, op, a: V, b: V) -> Optional[dict]:
        """``a op b`` as a polynomial over opaque terms (``tritonvalues.Poly``), None where
        not followed: sums and differences combine, products and quotients by numbers scale,
        a product of values multiplies their monomials (a sum is one opaque factor), a
        quotient divides each monomial of the dividend by the divisor's."""
        if isinstance(op, (ast.Add, ast.Sub)):
            pa, pb = self.as_sum(a), self.as_sum(b)
            return None if pa is None or pb is None else poly_add(pa, pb, 1.0 if isinstance(op, ast.Add) else -1.0)
        if not isinstance(op, (ast.Mult, ast.Div)):
            return None
        if not b.data and isinstance(op, ast.Div):
            pa, pb = self.as_sum(a), self.as_sum(b)
            return None if pa is None or pb is None else poly_div(pa, pb)
        if not (a.data and b.data):  # a number times a sum: each monomial scaled
            pa, pb = self.as_sum(a), self.as_sum(b)
            return None if pa is None or pb is None else poly_mul(pa, pb)
        pa, pb = (self.as_factor(a) if isinstance(op, ast.Mult) else self.as_sum(a)), self.as_factor(b)
        if pa is None or pb is None:
            return None
        return poly_mul(pa, pb) if isinstance(op, ast.Mult) else poly_div(pa, pb)

    def coefficient(self, c: V):
        """(known number or None, whether ``c`` may scale or shift an affine chain): a number,
        or inside a loop a value that does not vary there."""
        if c.ptr:
            return None, False
        if c.data == 0 and isinstance(c.const, (int, float)) and not isinstance(c.const, bool):
            return float(c.const), True
        return None, self.mult > 1 and max(1.0, c.born) < self.mult

    def affine(self, op, a: V, b: V, shape) -> Optional[V]:
        """``x`` times, plus, minus or over an invariant coefficient (``tritonvalues.V.aff``):
        the chain from its root costs a multiply and an add per element at most, nothing
        where it composes to the identity; times zero it is a constant."""
        if not isinstance(op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            return None
        for x, c, right in ((a, b, True), (b, a, False)):
            k, ok = self.coefficient(c)
            if not x.data or not ok or (isinstance(op, ast.Div) and not right):
                continue
            root, a0, b0, kinds, cops, cb = x.aff or (x, 1.0, 0.0, frozenset(), {}, x.born)
            if isinstance(op, (ast.Mult, ast.Div)):
                if k is not None and isinstance(op, ast.Div):
                    if k == 0:
                        return None
                    k = 1.0 / k
                a1 = a0 * k if k is not None and a0 is not None else None
                b1 = (b0 * k if k is not None else (0.0 if b0 == 0.0 else None)) if b0 is not None else None
                kinds = kinds | {"mul"}
            elif right or isinstance(op, ast.Add):  # x + c, c + x, x - c
                a1 = a0
                b1 = b0 + (k if isinstance(op, ast.Add) else -k) if k is not None and b0 is not None else None
                kinds = kinds | {"add"}
            else:  # c - x
                a1 = -a0 if a0 is not None else None
                b1 = k - b0 if k is not None and b0 is not None else None
                kinds = kinds | {"mul", "add"}
            cops, cb = {**cops, **c.ops}, max(cb, c.born)
            born = max(x.born, c.born)
            if a1 == 0.0 and b1 is not None:  # 0·x + b: no longer x
                return V(shape=shape, const=b1, born=born)
            if a1 is not None and b1 is not None and abs(a1 - 1.0) <= _EPS and abs(b1) <= _EPS:
                return replace(root, shape=shape, ops={**root.ops, **cops}, born=born, aff=None)
            n = ("mul" in kinds and a1 != 1.0) + ("add" in kinds and b1 != 0.0)
            self.next_id += 1
            distinct = min(numel(shape), spread(x) * spread(c))
            ops = {**root.ops, **cops, self.next_id: float(distinct * n) * self.at(cb)}
            return V(shape=shape, data=2, ops=ops, src=x.src | c.src, born=born, aff=(root, a1, b1, kinds, cops, cb),
                     spread=distinct if distinct < numel(shape) else None)
        return None

    def elementwise(self, vals: list, weight: float) -> V:
        """An elementwise op: work where it reads memory's data, else an index."""
        shape = bcast(*[v.shape for v in vals])
        born = max((v.born for v in vals), default=0.0)
        src: frozenset = frozenset().union(*[v.src for v in vals])
        if any(v.ptr for v in vals):
            return V(shape=shape, ptr=True, bases=frozenset().union(*[v.bases for v in vals if v.ptr]), src=src,
                     born=born)
        if not any(v.data for v in vals):
            return V(shape=shape, src=src, born=born)
        distinct = min(numel(shape), math.prod(spread(v) for v in vals))
        few = distinct if distinct < numel(shape) else None  # a value spread over the lanes: once each
        if weight == 0.0:  # a select or a plain pass: data moves on, no op
            ops: dict = {}
            for v in vals:
                ops.update(v.ops)
            return V(shape=shape, data=max(v.data for v in vals), ops=ops, src=src, born=born, spread=few)
        return replace(self.op(weight * distinct, *vals, shape=shape), spread=few)

    def subscript(self, v: V, sl) -> V:
        items = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        if v.shape is None or isinstance(v.const, tuple):
            if isinstance(v.const, tuple) and isinstance(sl, ast.Constant) and isinstance(sl.value, int):
                try:
                    return V(const=v.const[sl.value])
                except IndexError:
                    return V()
            return replace(v, shape=None if v.shape is None else (), const=None, ops=dict(v.ops), aff=None,
                           term=0, poly=None)
        dims, shape = list(v.shape), []
        for it in items:
            if isinstance(it, ast.Constant) and it.value is None:
                shape.append(1)
            elif isinstance(it, ast.Slice) and dims:
                shape.append(dims.pop(0))
            elif dims:
                dims.pop(0)
        return replace(v, shape=tuple(shape + dims), ops=dict(v.ops), aff=None, term=0, poly=None)

    def load(self, ptr: V, mask: Optional[V] = None, shape="same") -> V:
        mask = mask or V()
        values = {self.consts.get(b) for b in ptr.bases} if ptr.bases else {None}
        if len(values) == 1 and None not in values:  # a tensor torch filled with one constant
            # (masked-off lanes take ``other``, another constant: no data either way); the same
            # value wherever it is read from: it varies in no loop
            return V(shape=ptr.shape if shape == "same" else shape, const=values.pop())
        return V(shape=ptr.shape if shape == "same" else shape, data=1, src=ptr.bases | ptr.src | mask.src,
                 born=max(ptr.born, mask.born))

    def call(self, e: ast.Call, env: dict, depth: int) -> V:
        name = dotted(e.func)
        last = name.split(".")[-1]
        if isinstance(e.func, ast.Attribute) and _is_method(e.func, env):  # x.to(...), tl.load(p).to(...)
            return self.method(self.expr(e.func.value, env, depth), last, e, env, depth)
        args = [self.expr(a, env, depth) for a in e.args]
        kw = {k.arg: self.expr(k.value, env, depth) for k in e.keywords if k.arg}
        if last in self.funcs and depth < MAX_DEPTH and "." not in name:
            return self.helper(self.funcs[last], args, kw, depth)
        if last == "program_id":  # one of the grid's programs
            return V(rng=(0, self.programs - 1))
        if last == "num_programs":  # the whole grid (exact for a 1-D one)
            return V(const=self.programs)
        if last in ("make_block_ptr", "make_tensor_descriptor"):  # a tile's address: its block shape
            blk = (kw.get("block_shape") or (args[4] if last == "make_block_ptr" and len(args) > 4 else
                                            args[3] if len(args) > 3 else V())).const
            ok = isinstance(blk, tuple) and all(isinstance(d, int) for d in blk)
            base = kw.get("base") or (args[0] if args else V())
            return V(shape=tuple(blk) if ok else None, ptr=True, bases=base.bases, src=base.src, born=base.born)
        if last in ("load_tensor_descriptor", "_experimental_descriptor_load") and args:
            born = max([a.born for a in args[1:]], default=0.0)
            return self.load(replace(args[0], born=max(args[0].born, born)))
        if last in ("store_tensor_descriptor", "_experimental_descriptor_store") and len(args) >= 3:
            self.store(args[2], numel(args[2].shape), replace(args[0], born=max(args[0].born, args[1].born)))
            return V()
        if last == "arange" and len(args) >= 2 and all(isinstance(a.const, int) for a in args[:2]):
            return V(shape=(args[1].const - args[0].const,), rng=(args[0].const, args[1].const - 1))
        if last in ("zeros", "full", "zeros_like", "full_like", "ones", "rand", "randn", "randint"):
            shp = (args[0] if args else kw.get("shape", V())).const
            uniform = 1 if last in ("zeros", "full", "zeros_like", "full_like", "ones") else None  # one value
            if last.endswith("_like") and args:
                return V(shape=args[0].shape, spread=uniform)
            return V(shape=tuple(shp) if isinstance(shp, tuple) and all(isinstance(d, int) for d in shp) else
                     ((shp,) if isinstance(shp, int) else None), spread=uniform)
        if last == "load" and args:
            return self.load(args[0], kw.get("mask") or (args[1] if len(args) > 1 else None))
        if last == "store" and len(args) >= 2:
            self.store(args[1], numel(bcast(args[0].shape, args[1].shape)), args[0],
                       kw.get("mask") or (args[2] if len(args) > 2 else None))
            return V()
        if last in ("atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_and", "atomic_or",
                    "atomic_xor", "atomic_cas") and len(args) >= 2:
            val = args[1] if last != "atomic_cas" or len(args) < 3 else args[2]
            v = self.op(numel(bcast(args[0].shape, val.shape)), val, shape=val.shape) if val.data else val
            self.store(v, numel(val.shape), args[0], kw.get("mask"), atomic=True)
            return self.load(args[0], kw.get("mask"))
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
            return replace(v, ops=dict(v.ops))
        born = max([a.born for a in args] + [v.born])
        if v.ptr and last == "load":  # a tensor descriptor's tile
            return self.load(replace(v, born=born))
        if v.ptr and last == "store" and len(args) >= 2:
            self.store(args[1], numel(args[1].shape), replace(v, born=born))
            return V()
        if v.ptr:  # any other method of an address (advance, ...): still an address
            return V(shape=v.shape, ptr=True, bases=v.bases, src=v.src, born=born)
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
            work = 2.0 * numel(a.shape) * b.shape[-1]
        parts = [a, b] + ([acc] if acc is not None else [])
        if not (a.data or b.data):
            return V(shape=shape, born=max(p.born for p in parts))
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
            return V(shape=shape, born=v.born)
        return self.op(float(spread(v)), v, shape=shape)  # a reduction of a broadcast reads what it spreads

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
            shape = bcast(shape, args[1].shape)
        return replace(v, shape=shape, const=None, ops=dict(v.ops), aff=None, term=0, poly=None)


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



def _defaults(fn: ast.FunctionDef) -> dict:
    args = fn.args.args
    out = {}
    for a, d in zip(args[len(args) - len(fn.args.defaults):], fn.args.defaults):
        if isinstance(d, ast.Constant):
            out[a.arg] = V(const=d.value)
    return out


@dataclass(frozen=True)
class LaunchWork:
    """What one launch did, over its useful programs: compute ``work``; elements ``moved``
    (stored straight from memory); ``stored`` (distinct elements stored into reaching
    tensors, weighed by how much of each reaches); ``reads`` (the tensor parameters whose
    data the credited stores were computed from); ``wrote`` (the tensor parameters the
    credited stores went into)."""
    work: float = 0.0
    moved: float = 0.0
    stored: float = 0.0
    reads: frozenset = frozenset()
    wrote: frozenset = frozenset()


UNKNOWN = ["?"]  # a recorded argument the worker passed but could not record


def launch_detail(facts: dict, name: str, programs: int, args: dict, reach: Optional[dict] = None,
                  consts: Optional[dict] = None) -> LaunchWork:
    """One launch of Triton kernel ``name``: ``programs`` program instances, ``args`` the
    recorded arguments by parameter name (a number, ``["t", numel]`` for a tensor,
    ``["?"]`` for one passed but not recordable: unknown, never the source's default),
    ``reach`` the share of each tensor parameter that reaches the output (None: all),
    ``consts`` the tensor parameters torch filled with one constant before the launch (their
    loads are that constant: adding a loaded zero is no work; a launch that stores into one
    is read without it). Empty for a kernel the source does not define."""
    funcs = facts.get("triton") or {}
    fn = funcs.get(name)
    if fn is None:
        return LaunchWork()
    env = _defaults(fn)
    for pname, val in (args or {}).items():
        if isinstance(val, list) and len(val) == 2 and val[0] == "t":
            env[pname] = V(shape=(), ptr=True, bases=frozenset({pname}))
        elif isinstance(val, (int, float, bool)):
            env[pname] = V(const=val)
        else:  # passed, not recorded: unknown
            env[pname] = V(ptr=pname.endswith("ptr"), bases=frozenset({pname}) if pname.endswith("ptr") else frozenset())
    for a in fn.args.args:  # parameters not passed, without a default: pointers by name, else unknown scalars
        env.setdefault(a.arg, V(ptr=a.arg.endswith("ptr"), bases=frozenset({a.arg}) if a.arg.endswith("ptr")
                                else frozenset()))
    sizes = {p: v[1] for p, v in (args or {}).items() if isinstance(v, list) and len(v) == 2 and v[0] == "t"
             and isinstance(v[1], int)}
    try:
        run = _Launch(funcs, programs, reach, consts, sizes)
        run.run(fn, dict(env))
        credited = useful_programs(run.programs, args, run.stored)
        if run.stored_const or credited < run.programs:  # its loads from a filled tensor it writes are
            # not the fill; the stores' landing lanes are over the credited programs
            kept = {p: v for p, v in (consts or {}).items() if p not in run.stored_const}
            run = _Launch(funcs, programs, reach, kept, sizes, credited)
            run.run(fn, dict(env))
    except RecursionError:
        return LaunchWork()
    programs = useful_programs(run.programs, args, run.stored)
    return LaunchWork(run.work * programs, run.moved * programs, run.reached * programs, frozenset(run.reads),
                      frozenset(run.wrote))


def launch_work(facts: dict, name: str, programs: int, args: dict, reach: Optional[dict] = None) -> tuple[float, float]:
    """(compute work, elements moved) of one launch (``launch_detail``)."""
    d = launch_detail(facts, name, programs, args, reach)
    return d.work, d.moved


def _assigned(body) -> set:
    """The names a loop body assigns (its carried values among them)."""
    return {n.id for st in body for n in ast.walk(st) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


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

