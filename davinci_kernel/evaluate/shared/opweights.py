"""Per-element weights of torch's element ops, counted from torch's own decompositions: the
generator of ``op_weights.json``, the table ``opwork`` weighs element ops by.

An op that torch runs as one fused kernel (``F.batch_norm``, ``logcumsumexp``, ``mse_loss``)
does per element what its written-out version does in several ops; weighed once per element
it would let a candidate leave a problem to torch and look cheap. Each op that ``opwork``
weighs by its elements (``op_class`` ``elements``: listed there or tagged pointwise/reduction
by torch; data movers, ``opwork.MOVE_OPS``, aside) and that has a decomposition
(``torch._decomp.decomposition_table``, or one of ``extra_decompositions`` where torch has
none) is called the way torch's own tests call it: the ``sample_inputs`` of the OpInfos in
``torch.testing._internal``'s ``op_db`` run under a dispatch mode that records the aten calls
they make. Each recorded call is traced with ``make_fx`` through the decompositions,
recursively, down to primitive ops, with symbolic sizes, and its count is the number of
full-size compute ops in that trace (``count`` says which count). An op's weight is the
largest count over its samples at default scalar arguments (``Weighed``), at least 1. An op
no OpInfo reaches on the CPU (a GPU library's ``cudnn_batch_norm``, a fused kernel the CPU
runs only inside a composite) is called with arguments made from its schema
(``schema_calls``); an op torch has no decomposition for that does another's work is
weighed as that one (``ALIASES``; each ``_foreach_`` op as its per-tensor op).

Run ``python -m davinci_kernel.evaluate.shared.opweights`` to rewrite the table (after a torch
upgrade: tests/test_evaluate_credit.py regenerates part of it and compares). Covers: the
capture, the count, the table. Does not cover: how ``opwork`` uses the weights, ops without a
usable decomposition (weighed 1 per element there), ops torch implements in other ops
(CompositeImplicitAutograd, ``batch_norm``, ``instance_norm``, ``cross_entropy_loss``: the
profiler shows what they call, each weighed itself).
"""

from __future__ import annotations

import json
import sys
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import opwork

TABLE = Path(__file__).with_name("op_weights.json")
MIN_ELEMENTS = 4  # a call smaller than this cannot tell a per-row op from a full-size one
# reductions (prims and aten): one that keeps half its input or more reduces over 1 or 2 elements
REDUCTIONS = frozenset("sum amax amin prod var xor_sum mean std argmax argmin max min any all logsumexp".split())
SAMPLES_PER_OPINFO = 12  # the first samples of each OpInfo (its shapes and argument variants)
LARGE = 64  # every symbolic size is read at this: a per-row tensor is then far smaller than a full one
# prims that only move, view, cast, allocate or fill: no compute (aten's are opwork's MEMORY/MOVE/NO_WORK ops)
PRIM_MOVES = frozenset("""
as_strided as_strided_scatter broadcast_in_dim cat clone collapse collapse_view conj convert_element_type copy_strided
copy_to device_put empty empty_permuted empty_strided fill full full_like imag iota item maximum_value minimum_value
real reshape resize rev scalar_tensor split_dim squeeze transpose view_of view_of_dtype
""".split())
# Ops left at 1 per element though torch decomposes them, each for its reason:
SKIP = {
    "bucketize": "searchsorted, the same binary search, has no decomposition; the unrolled search's length is "
                 "the sample's",
    "floor_divide": "div(rounding_mode='floor') does the same and the profiler shows it as div (weighed at its "
                    "default mode); torch's decomposition spells out Python's rounding of signs",
}
# Ops kept whole in every trace: torch decomposes a running sum or product as a masked sum
# over a square (an O(n^2) way no kernel runs), so a scan is one op, not what that does.
LEAVES = ("cumsum", "cumprod")
SIMPLE = "(simple shapes)"  # the source named for ``schema_calls``' samples
# Ops torch has no decomposition for, each the work of ops it has one for (weights summed):
ALIASES = {
    "miopen_batch_norm": ("native_batch_norm",),  # the same normalisation in AMD's library
    "batch_norm_stats": ("var_mean",),  # SyncBatchNorm's first pass: a channel's mean and inverse deviation
    "batch_norm_elemt": ("native_batch_norm_legit_no_training",),  # its second: normalising with given statistics
    "masked_softmax": ("safe_softmax",),  # a softmax with a mask's select (attention's fast path)
    "native_norm": ("norm",),
    "add_relu": ("add", "relu"),
}


@dataclass(frozen=True)
class Sample:
    """One recorded call, counted: ``ops`` (the full-size compute ops' names), ``size`` (the
    elements ``opwork`` weighs it by, sizes read at ``LARGE``), ``unusable`` (why, if so:
    see ``count``) and ``defaults`` (its scalar coefficients and modes at their defaults)."""

    ops: tuple[str, ...]
    size: int
    unusable: str
    defaults: bool


@dataclass
class Weighed:
    """One op's counted calls and the OpInfos that made them."""

    samples: list[Sample] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)

    def chosen(self) -> list[Sample]:
        """The samples that weigh the op: the usable ones, those at default scalar arguments
        where there are any (``add(x, y, alpha=2)`` is an add and a multiply, but the
        profiler shows one ``aten::add`` either way: the common call weighs the op)."""
        usable = [s for s in self.samples if not s.unusable]
        return [s for s in usable if s.defaults] or usable

    @property
    def weight(self) -> int:
        """The largest count of the chosen samples, at least 1 (1 where none is usable): an
        argument the profiler cannot see that changes the decomposition (``batch_norm``'s
        ``training``, ``mse_loss``'s ``reduction``) weighs the op as its larger form."""
        return max([1, *(len(s.ops) for s in self.chosen())])

    def record(self) -> dict:
        chosen = self.chosen()
        top = max(chosen, key=lambda s: len(s.ops), default=None)
        return {"weight": self.weight, "least": max(1, min((len(s.ops) for s in chosen), default=1)),
                "samples": len(chosen), "of": len(self.samples), "ops": list(top.ops) if top else [],
                "from": sorted(self.sources)}


def key(name: str) -> str:
    """The table's key for an aten op: its name as ``opwork.op_work`` looks it up (without
    ``aten::``, overload, leading or trailing ``_``)."""
    return name.split(".")[0].strip("_")


def load_op_db():
    """torch's OpInfo list. Its module imports ``expecttest`` (a test-only package) for one
    base class; where it is missing a stand-in module with ``unittest``'s is given."""
    import importlib.util

    if "expecttest" not in sys.modules and importlib.util.find_spec("expecttest") is None:
        import types
        import unittest

        stand_in = types.ModuleType("expecttest")
        stand_in.TestCase, stand_in.ACCEPT = unittest.TestCase, False
        sys.modules["expecttest"] = stand_in
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def extra_decompositions() -> dict:
    """Decompositions of ops torch has none for, written the way a problem writes the op out,
    traced and counted like torch's: ``logcumsumexp`` (a max, a subtraction, an exponential,
    a running sum, a logarithm and an addition per element) and the primitive variance
    ``prims.var`` that torch's own decompositions end in (a mean, a subtraction, a square
    and a sum: what ``x.var()`` written out does)."""
    import torch

    aten, prims = torch.ops.aten, torch.ops.prims

    def logcumsumexp(x, dim):
        m = torch.amax(x, dim, keepdim=True) if x.numel() else x
        return torch.log(torch.cumsum(torch.exp(x - m), dim)) + m

    def var(x, dims, correction=1, *, output_dtype=None):
        dims = list(range(x.ndim)) if dims is None else list(dims)
        n = 1
        for d in dims:
            n = n * x.shape[d]
        d = x - torch.sum(x, dims, keepdim=True) / n
        return torch.sum(d * d, dims) / (n - (correction or 0))

    return {aten.logcumsumexp.default: logcumsumexp, aten._logcumsumexp.default: logcumsumexp,
            prims.var.default: var}


def decompositions() -> dict:
    """torch's decomposition table with ``extra_decompositions`` and without ``LEAVES``."""
    import torch
    from torch._decomp import decomposition_table

    leaves = {getattr(getattr(torch.ops.aten, n), o) for n in LEAVES for o in getattr(torch.ops.aten, n).overloads()}
    return {**{k: v for k, v in decomposition_table.items() if k not in leaves}, **extra_decompositions()}


def _elements(value) -> list[int]:
    """Elements of each tensor in ``value``, symbolic sizes read at ``LARGE``."""
    import torch
    from torch.utils import _pytree as pytree

    return [_int(x.numel()) for x in pytree.tree_leaves(value) if isinstance(x, torch.Tensor)]


def _int(n) -> int:
    node = getattr(n, "node", None)
    if node is None:
        return int(n)
    expr = node.expr
    return int(expr.subs({s: LARGE for s in expr.free_symbols}))


def _shape(t) -> list[int]:
    return [_int(d) for d in t.shape]


def _moves(target) -> bool:
    ns, name = target.namespace, target._opname
    if ns == "prims":
        return name in PRIM_MOVES
    return opwork.no_work(name) or name.strip("_") in opwork.MOVE_OPS or opwork.op_class(name) == "memory"


def _unwrap(kind: str) -> str:
    """A schema type without its ``Optional[...]``."""
    return kind[len("Optional["):-1] if kind.startswith("Optional[") else kind


def _defaults(func, args, kwargs) -> bool:
    """Whether each scalar coefficient or mode argument (a number, float or string; an int
    given by keyword: ``alpha``, ``value``, ``rounding_mode``, ``approximate``, ``decimals``,
    ``dtype``) is at its default (an optional one without a default: unset; a required
    keyword int: 0). Sizes, dimensions, flags and tensors do not choose. A Python function
    (no schema) is called as given."""
    schema = getattr(func, "_schema", None)
    for i, a in enumerate(schema.arguments if schema is not None else []):
        kind = _unwrap(str(a.type))
        if kind not in ("number", "float", "str") and not (kind == "int" and a.kwarg_only):
            continue
        if a.name in kwargs:
            given = kwargs[a.name]
        elif i < len(args) and not a.kwarg_only:
            given = args[i]
        else:
            continue  # not given: its default
        if a.has_default_value():
            default = a.default_value
        elif str(a.type).startswith("Optional"):
            default = None
        elif a.kwarg_only:
            default = 0 if kind == "int" else None  # a required keyword (``round``'s ``decimals``): 0
        else:
            continue  # a required positional (``lerp``'s weight): every value is the op
        if given != default:
            return False
    return True


def _free(graph) -> set:
    """Nodes that do no work on the data: those that read no input's values (index
    arithmetic on ``iota``, constants), an arithmetic identity (``x * 1``, ``x + 0``: a
    default coefficient), and the comparisons (and their operands) that only make a
    ``where``'s condition, one op with the select (torch's decompositions spell out NaN
    checks there: one clamp bound reads as two compares, an or and a select)."""
    import torch

    data: set = set()
    for node in graph.nodes:
        random = torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
        if node.op == "placeholder" or (isinstance(node.meta.get("val"), torch.Tensor) and (random or any(
                a in data for a in node.all_input_nodes))):
            data.add(node)
    free = {n for n in graph.nodes if n.op == "call_function" and n not in data}
    for node in graph.nodes:
        name = getattr(node.target, "_opname", "")
        scalars = [a if isinstance(a, (int, float)) and not isinstance(a, bool) else None for a in node.args[:2]]
        if (name == "mul" and 1 in scalars) or (name == "add" and 0 in scalars) or \
                (name in ("div", "true_divide") and scalars[1:] == [1]) or (name == "sub" and scalars[1:] == [0]):
            free.add(node)
    condition: set = set()
    for node in reversed(list(graph.nodes)):
        users = list(node.users)
        if node.op == "call_function" and users and all(
                u in condition or (_is_where(u) and u.args[0] is node and node not in u.args[1:]) for u in users):
            condition.add(node)
    return free | condition


def _is_where(node) -> bool:
    return node.op == "call_function" and getattr(node.target, "_opname", "") == "where" and len(node.args) == 3


def measure(args, kwargs, shape_of) -> int:
    """The elements ``opwork.op_work`` weighs a call by: the largest of its tensor inputs,
    their broadcast shape and its tensor lists summed (``shape_of``: a tensor's shape)."""
    import torch
    from torch.utils import _pytree as pytree

    shapes = [shape_of(x) for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    lists = [sum(opwork._numel(shape_of(t)) for t in a) for a in args if isinstance(a, (list, tuple)) and a
             and all(isinstance(t, torch.Tensor) for t in a)]
    return max([0, opwork.broadcast_numel(shapes), *(opwork._numel(s) for s in shapes), *lists])


def _sizes(graph, args, kwargs, tensors) -> tuple[int, int, list]:
    """(the elements a call is weighed by, its largest output's, its inputs' traced values)
    in a traced graph."""
    import torch
    from torch.utils import _pytree as pytree

    inputs = [n.meta.get("val") for n in graph.nodes if n.op == "placeholder"]
    shapes = {id(t): _shape(v) for t, v in zip(tensors, inputs) if isinstance(v, torch.Tensor)}
    size = measure(args, kwargs, lambda t: shapes.get(id(t), list(t.shape)))
    outs = [a for n in graph.nodes if n.op == "output" for a in pytree.tree_leaves(n.args) if hasattr(a, "meta")]
    return size, max([0, *(m for a in outs for m in _elements(a.meta.get("val")))]), inputs


def _shape_class(out: int, size: int) -> tuple[bool, bool]:
    return 2 * out >= size, out > 2 * size


def _trace(func, args, kwargs, table: dict, run: bool):
    """(graph, the elements the call is weighed by, its largest output's, its inputs' traced
    values): ``func`` traced through ``table`` with symbolic sizes (each size of 2 or more a
    symbol, read at ``LARGE``), or at the sample's own sizes where that fails or misstates
    the call (an output sized by arguments, an upsampling's, is then no longer larger than
    its input). ``run``: the call may be run for its real outputs (not for arguments made
    from a schema, which a kernel may not check)."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils import _pytree as pytree

    leaves, spec = pytree.tree_flatten((args, kwargs))
    at = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    tensors = [leaves[i] for i in at]

    def call(*values):
        filled = list(leaves)
        for i, t in zip(at, values):
            filled[i] = t
        a, k = pytree.tree_unflatten(filled, spec)
        return func(*a, **k)

    def traced(mode: str):
        graph = make_fx(call, decomposition_table=table, tracing_mode=mode)(*tensors).graph
        return (graph, *_sizes(graph, args, kwargs, tensors))

    real, real_out = None, None
    if run:
        try:
            with torch.no_grad():
                real_out = max(_elements(call(*[t.clone() for t in tensors])) + [0])
        except (NotImplementedError, RuntimeError):  # no kernel here (a GPU library's op)
            real_out = None
    if real_out is None:  # not run, or no kernel: its decomposition's output size
        real = traced("real")
        real_out = real[2]
    try:
        symbolic = traced("symbolic")
    except Exception:  # noqa: BLE001 - a decomposition that needs concrete sizes
        symbolic = None
    if symbolic is not None and _shape_class(symbolic[2], symbolic[1]) == _shape_class(
            real_out, measure(args, kwargs, lambda t: list(t.shape))):
        return symbolic
    return real if real is not None else traced("real")


def count(func, args, kwargs, table: dict, run: bool = True) -> Sample:
    """One call of ``func`` (an aten op, or any function of tensors) traced through
    ``table`` (``decompositions()``) down to primitives (``_trace``). A node counts if it is
    no move (view, copy, cast, fill: ``PRIM_MOVES`` and ``opwork``'s), does work on the data
    (not ``_free``) and its largest tensor (in or out) has at least half the elements the
    call is weighed by (``measure``): per-row statistics do not. Unusable, as telling no
    per-row op from a full-size one: a call of fewer than ``MIN_ELEMENTS``, one with an
    input (per channel) of half its elements or more, one with a reduction over 1 or 2
    elements; and, as no measure of the op, one whose decomposition computes on a tensor
    more than twice the size of everything the op reads and writes."""
    import torch

    graph, size, out, inputs = _trace(func, args, kwargs, table, run)
    bound = max(size, out)
    unusable = "" if size >= MIN_ELEMENTS else f"fewer than {MIN_ELEMENTS} elements"
    small = [n for n in inputs if isinstance(n, torch.Tensor) and size <= 2 * _elements(n)[0] < 2 * size]
    if not unusable and small:
        unusable = f"an input of {_elements(small[0])[0]} elements for {size}: a per-channel op reads as full-size"
    names, free = [], _free(graph)
    for node in graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        result = max(_elements(node.meta.get("val")) + [0])
        largest = max([result] + [n for a in node.all_input_nodes for n in _elements(a.meta.get("val"))])
        if not unusable and node.target._opname in REDUCTIONS and 2 * result >= size and largest >= size:
            unusable = f"{node.target} keeps {result} of {largest} elements: a reduction over 1 or 2"
        if _moves(node.target) or node in free:
            continue
        if largest > 2 * bound and not unusable:
            unusable = f"{node.target} computes on {largest} elements for {size}"
        if 2 * largest >= size:
            names.append(f"{node.target.namespace}.{node.target._opname}")
    return Sample(tuple(names), size, unusable, _defaults(func, args, kwargs))


def _elsewhere(name: str) -> bool:
    """Element ops this table does not weigh: data movers (``opwork.MOVE_OPS``: a copy is a
    copy), ops ``opwork`` weighs by a formula (a grid sample by its points), ``SKIP``."""
    return name in opwork.MOVE_OPS or name in opwork._CONTRACTIONS or name in opwork._CONV \
        or name in opwork._EMBEDDING or name in SKIP


def _recorder(wanted):
    """A dispatch mode recording the aten calls (overload, arguments) that ``wanted`` picks."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if wanted(func):
                self.calls.append((func, args, kwargs))
            return func(*args, **kwargs)

    return Recorder()


def _dtype(info):
    import torch

    supported = info.supported_dtypes("cpu")
    return next((dt for dt in (torch.float32, torch.float64, torch.int64, torch.bool) if dt in supported), None)


def opinfo_name(info) -> str:
    return info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")


def _candidates(arg, x, other, given: bool) -> list:
    """Values to try for one required argument of an op no OpInfo reaches (``schema_calls``):
    ``other`` the shape of every tensor but the first, ``given`` whether optional ones are."""
    import torch

    kind, name = str(arg.type), arg.name
    optional, kind = kind.startswith("Optional["), _unwrap(kind)
    if kind == "Tensor":
        return [None] if optional and not given else [torch.rand(other) + 0.5]
    if kind == "List[Tensor]":
        return [[x, torch.randn(x.shape)]]
    if "dtype" in name:
        return [torch.float32]
    if kind in ("int", "SymInt"):
        return [1, -1] if "dim" in name else [2] if name == "p" else [1]
    if kind in ("List[int]", "List[SymInt]"):
        return [[x.shape[-1]], list(x.shape[-2:])] if "shape" in name else [[1]]
    if kind == "float":
        return [0.1] if "momentum" in name or "factor" in name else [1e-5] if "eps" in name else [0.5]
    if kind == "bool":
        return [False, True]
    if kind == "number":
        return [1]
    return [None] if optional else []


def schema_calls(func) -> list[list[tuple[tuple, dict]]]:
    """Calls of ``func`` made from its schema, in groups (the first that traces weighs the op,
    so that running statistics are not taken for full-size tensors nor an affine left out):
    the first tensor a (4, 8, 6, 5) one, every other one per channel, then of the same shape,
    then per feature, optional ones given, then the same with them left out; other required
    arguments each of a few plain values (a dimension, a shape, an epsilon, both flags),
    optional ones at their defaults."""
    import itertools

    import torch

    x = torch.randn(4, 8, 6, 5)
    schema = func._schema
    if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments if a.kwarg_only):
        return []  # out= variants: the functional one is weighed
    required = [a for a in schema.arguments if not a.has_default_value() and not a.kwarg_only]
    if not required or str(required[0].type) != "Tensor":
        return []
    groups = []
    for given, other in itertools.product((True, False), (x.shape[1:2], x.shape, x.shape[-1:])):
        options = [[x]] + [_candidates(a, x, other, given) for a in required[1:]]
        groups.append([(tuple(c), {}) for c in itertools.product(*options)] if all(options) else [])
    return groups


def generate(opinfos=None, keys=None, log=None) -> dict[str, Weighed]:
    """Weigh every element op with a decomposition that the OpInfos (all, or those named in
    ``opinfos``) call, then (``schema_calls``) each one they leave unweighed (GPU library
    kernels, ops the CPU reaches only inside others); ``keys``: only those table keys.
    ``log``: one line per call that could not be traced."""
    import torch

    table = decompositions()
    picked: dict = {}

    def wanted(func) -> bool:
        name = func._opname
        if func.namespace != "aten" or func not in table or (keys is not None and key(name) not in keys):
            return False
        hit = picked.get(name)
        if hit is None:
            hit = picked[name] = opwork.op_class(name) == "elements" and not _elsewhere(key(name))
        return hit

    out: dict[str, Weighed] = {}

    def weigh(func, args, kwargs, source: str) -> bool:
        try:
            sample = count(func, args, kwargs, table, run=source != SIMPLE)
        except Exception as exc:  # noqa: BLE001 - a decomposition that cannot trace this call
            if log:
                log(f"{func}: {type(exc).__name__}: {str(exc)[:100]}")
            return False
        w = out.setdefault(key(func._opname), Weighed())
        w.samples.append(sample)
        w.sources.add(source)
        return True

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in load_op_db():
            name, dtype = opinfo_name(info), _dtype(info)
            if (opinfos is not None and name not in opinfos) or dtype is None:
                continue
            torch.manual_seed(0)
            try:
                samples = list(info.sample_inputs("cpu", dtype, requires_grad=False))[:SAMPLES_PER_OPINFO]
            except Exception:  # noqa: BLE001 - an OpInfo that cannot make samples here: nothing to weigh
                continue
            for s in samples:
                mode = _recorder(wanted)
                try:
                    with mode:
                        info.op(s.input, *s.args, **s.kwargs)
                except Exception:  # noqa: BLE001 - a sample this build rejects (an error-input case)
                    pass
                for func, args, kwargs in mode.calls:
                    weigh(func, args, kwargs, name)
        if opinfos is None or keys is not None:
            for func in sorted((f for f in table if isinstance(f, torch._ops.OpOverload) and wanted(f)), key=str):
                if out.get(key(func._opname), Weighed()).chosen():
                    continue
                torch.manual_seed(0)
                for group in schema_calls(func):
                    if sum(weigh(func, args, kwargs, SIMPLE) for args, kwargs in group[:SAMPLES_PER_OPINFO]):
                        break
    return out


def records(weighed: dict[str, Weighed]) -> dict[str, dict]:
    """The table's ``ops``: each weighed op with a usable sample (``Weighed.record``), each
    of ``ALIASES``, and each ``_foreach_`` op as its per-tensor op (a list of tensors, each
    doing what the op does to one)."""
    import torch

    ops = {k: weighed[k].record() for k in sorted(weighed) if weighed[k].chosen()}
    extra = {k: {"weight": sum(ops.get(a, {"weight": 1})["weight"] for a in v), "alias": list(v)}
             for k, v in ALIASES.items()}
    for name in sorted({n.split("::")[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
                        if n.startswith("aten::_foreach_")}):
        base = key(name[len("_foreach_"):])
        if base in ops:
            extra[key(name)] = {"weight": ops[base]["weight"], "alias": [base]}
    return {**ops, **{k: extra[k] for k in sorted(extra) if k not in ops}}


def write(weighed: dict[str, Weighed], path: Path = TABLE) -> None:
    """The table: torch's version, the settings, and ``records``."""
    import torch

    doc = {"about": "per-element weights of element ops: full-size compute ops of torch's decompositions "
                    "(written by davinci_kernel/evaluate/shared/opweights.py; do not edit)",
           "torch": torch.__version__, "min_elements": MIN_ELEMENTS, "samples_per_opinfo": SAMPLES_PER_OPINFO,
           "large": LARGE, "leaves": list(LEAVES), "skip": SKIP, "ops": records(weighed)}
    path.write_text(json.dumps(doc, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else TABLE
    failures: Counter = Counter()
    weighed = generate(log=lambda m: failures.update([m]))
    write(weighed, path)
    for line, n in failures.most_common():
        print(f"{n:4d} x {line}", file=sys.stderr)
    heavy = sum(w.weight > 1 for w in weighed.values())
    print(f"{len(weighed)} ops, {heavy} weighed more than 1 per element -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
