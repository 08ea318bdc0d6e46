"""The code policy's pointer rules: no candidate turns an integer into a pointer or gets hold
of a pointer type, by any route the source shows (harness side).

An integer made a pointer is a raw address: under the CPU interpreter any byte of the
worker, on a GPU any byte of the process's device memory. Triton makes one wherever an
integer meets a pointer type, so every route to a pointer type is closed, not one spelling:

  * by name: the names that make one (``pointer_type``, ``str_to_ty``, ``pi32_t``, ...:
    ``policy_tables.POINTER_NAMES``) are refused wherever they stand (attributes, imports,
    aliases: ``policy.py``);
  * from a pointer value: inside ``@triton.jit`` bodies the type of a value that may be a
    pointer (``p.dtype``, ``p.type``, ``p.type.scalar``, and ``q.type.element_ty`` of a block
    of pointers) is read only as its element type (``p.dtype.element_ty``), for a property
    (``p.type.element_ty.itemsize``) or in a comparison (``p.type == q.type``). Which values may be
    pointers is followed through locals, arithmetic, shape ops and helper calls (a helper's
    parameter may be a pointer when a call passes one; every parameter but the constexprs
    of a kernel launched, passed on or never named), so no local, helper parameter or
    alias carries a pointer type to a cast. A cast whose target names such a value's type
    directly (``x.to(p.dtype)``, ``tl.cast``, ``tl.core.cast``, ``.cast``, ``dtype=``) is
    refused too (a value's own type, ``y.to(x.dtype)`` with ``x`` loaded, is fine);
  * by launch signature: a jit parameter's annotation is a constexpr, a scalar type or
    nothing (``addr: "*fp32"`` makes Triton pass an integer argument as a pointer);
  * by a host object posing as a tensor: Triton passes any object with ``data_ptr`` as a
    pointer to whatever integer it returns, so the candidate defines no ``data_ptr``;
  * by inline assembly: ``inline_asm_elementwise`` takes a string literal with no memory
    operand (``[...]``) and no call (an integer dereferenced in PTX);
  * around the jit-body rules: ``triton.jit`` (``autotune``, ``heuristics``) is used only as
    a decorator or on a function already decorated (``triton.jit(f)`` would make a kernel of
    a body no jit rule read).

Does not cover: pointer arithmetic from a pointer the kernel was given (``p + offset`` is
every kernel's indexing; an offset past the tensor is the runtime's matter: on the CPU
``candidate/interp_bounds.py`` holds each access to the launch's tensors), native code
(``native_policy.py``), or names built at run time (refused with reflection: ``policy.py``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Optional

from .policy_tables import JIT_DECORATORS, POINTER_NAMES

Resolve = Callable[[ast.AST], Optional[str]]
Found = list[tuple[int, str, str]]  # (line, rule, message)

RULE = "pointer"
TYPE_ATTRS = ("dtype", "type")  # a value's type: a pointer type on a pointer
ELEMENT_ATTRS = ("element_ty",)  # what may follow a pointer's type: its element type
TYPE_PROPERTIES = frozenset({"element_ty", "itemsize", "primitive_bitwidth", "name"})  # a type's non-type properties
CAST_FUNCTIONS = ("cast", "bitcast")  # triton.language functions whose second argument is a target type
CAST_METHODS = ("to", "cast")
CAST_KEYWORDS = ("dtype", "dst_ty")
# Calls whose result is a value, never a pointer, whatever their arguments (a cast's target
# is never a pointer type: every source of one is refused). Any other call's result may be a
# pointer where an argument may be one (shape ops, where, reductions, helpers).
VALUE_RESULTS = frozenset({
    "load", "to", "cast", "dot", "dot_scaled", "program_id", "num_programs", "arange", "zeros", "full", "cdiv",
    "argmax", "argmin", "load_tensor_descriptor", "atomic_add", "atomic_and", "atomic_cas", "atomic_max",
    "atomic_min", "atomic_or", "atomic_xchg", "atomic_xor", "rand", "randn", "randint"})
# Attributes of a pointer that are not pointers.
VALUE_ATTRS = frozenset({"element_ty", "shape", "numel", "ndim", "primitive_bitwidth", "is_ptr"})
INLINE_ASM = "inline_asm_elementwise"
ASM_REFUSED = ("[", "call", ".extern", ".func", ".global", ".local", ".param")  # memory operands, calls, declarations
# What a jit parameter's annotation may name, as a string (constexpr or a scalar type).
ANNOTATION_REFUSED = ("*", "const ", "desc", "ptr", "pointer")
SCALAR_BUILTINS = ("int", "float", "bool")  # annotations as Python types (not rebound by the candidate)


def check_tree(tree: ast.AST, resolve: Resolve, jit_fns: list[ast.FunctionDef]) -> Found:
    """Every pointer violation in ``tree``; ``jit_fns`` are its ``@triton.jit`` functions."""
    parent = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    out: Found = []
    out += _decorators_only(tree, resolve, parent, {fn.name for fn in jit_fns})
    out += _no_data_ptr(tree, parent)
    out += _inline_asm(tree, resolve)
    may = _pointer_params(tree, jit_fns, resolve, parent)
    rebound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)} | {
        a.asname or a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names} | {
        n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | {
        a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    for fn in jit_fns:
        out += _annotations(fn, resolve, rebound)
        tainted = _tainted(fn, may[fn.name], resolve)
        out += _pointer_types(fn, tainted, resolve, parent)
        out += [(c.lineno, RULE, f"@triton.jit function '{fn.name}' casts to a pointer's type (an integer made a "
                 "pointer is a raw address): cast to '.dtype.element_ty' or a tl dtype")
                for c in ast.walk(fn) if isinstance(c, ast.Call) and _pointer_cast(c, tainted, resolve)]
    return out


# --------------------------------------------------------------------------- which values may be pointers
def _last(func: ast.AST, resolve: Resolve) -> Optional[str]:
    path = resolve(func)
    if path is not None:
        return path.rsplit(".", 1)[-1]
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _may_be_pointer(e: Optional[ast.AST], tainted: set, resolve: Resolve) -> bool:
    """Whether the expression ``e`` may be a pointer (or a pointer's type), given the names
    that may hold one: conservative wherever the expression is not one of the known kinds."""
    if e is None or isinstance(e, ast.Constant):
        return False
    if isinstance(e, ast.Name):
        return e.id in tainted
    if isinstance(e, ast.Compare):
        return False
    if isinstance(e, ast.Attribute):
        return e.attr not in VALUE_ATTRS and _may_be_pointer(e.value, tainted, resolve)
    if isinstance(e, ast.Call):
        if _last(e.func, resolve) in VALUE_RESULTS:
            return False
        parts = list(e.args) + [k.value for k in e.keywords]
        if isinstance(e.func, ast.Attribute) and resolve(e.func) is None:
            parts.append(e.func.value)  # a method's receiver
        return any(_may_be_pointer(p, tainted, resolve) for p in parts)
    return any(_may_be_pointer(c, tainted, resolve) for c in ast.iter_child_nodes(e)
               if isinstance(c, ast.expr))


def _bindings(fn: ast.FunctionDef):
    """(targets, value) of every binding in ``fn``'s body (assignments, loops, ``with``)."""
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign):
            yield n.targets, n.value
        elif isinstance(n, (ast.AnnAssign, ast.NamedExpr)) and n.value is not None:
            yield [n.target], n.value
        elif isinstance(n, ast.AugAssign):
            yield [n.target], ast.BinOp(left=n.target, op=n.op, right=n.value)
        elif isinstance(n, (ast.For, ast.comprehension)):
            yield [n.target], n.iter
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            yield [n.optional_vars], n.context_expr


def _tainted(fn: ast.FunctionDef, params: set, resolve: Resolve) -> set:
    """The names in ``fn`` that may hold a pointer: ``params`` and whatever is bound from one
    (flow-insensitive: a name bound from a pointer anywhere may be one everywhere)."""
    tainted = set(params)
    binds = list(_bindings(fn))
    changed = True
    while changed:
        changed = False
        for targets, value in binds:
            if _may_be_pointer(value, tainted, resolve):
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name) and n.id not in tainted:
                            tainted.add(n.id)
                            changed = True
    return tainted


def _constexpr(a: ast.arg, resolve: Resolve) -> bool:
    ann = a.annotation
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        return "constexpr" in ann.value
    return ann is not None and (resolve(ann) or "").endswith(".constexpr")


def _params(fn: ast.FunctionDef) -> list[ast.arg]:
    a = fn.args
    return a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x is not None]


def _pointer_params(tree: ast.AST, jit_fns: list[ast.FunctionDef], resolve: Resolve, parent: dict) -> dict:
    """Each jit function's parameters that may receive a pointer: all but the constexprs of
    one not only called from jit bodies (launched, passed on, or never named), and those a
    jit body's call passes a may-be-pointer argument to."""
    by_name = {fn.name: fn for fn in jit_fns}
    inside: dict[int, ast.FunctionDef] = {id(n): fn for fn in jit_fns for n in ast.walk(fn)}
    may: dict[str, set] = {name: set() for name in by_name}
    calls = []
    helper_only = set(by_name)
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Name) and n.id in by_name and isinstance(n.ctx, ast.Load)):
            continue
        call = parent.get(id(n))
        if isinstance(call, ast.Call) and call.func is n and id(n) in inside:
            calls.append((inside[id(n)], call, by_name[n.id]))
        else:  # launched, or passed on (a combine function, an alias)
            helper_only.discard(n.id)
    for fn in jit_fns:  # one not only called from jit bodies: any argument may be a pointer
        if fn.name not in helper_only or not any(callee is fn for _, _, callee in calls):
            may[fn.name] |= {a.arg for a in _params(fn) if not _constexpr(a, resolve)}
    changed = True
    while changed:
        changed = False
        tainted = {fn.name: _tainted(fn, may[fn.name], resolve) for fn in jit_fns}
        for caller, call, callee in calls:
            names = [a.arg for a in callee.args.posonlyargs + callee.args.args]
            hit: set = set()
            for i, arg in enumerate(call.args):
                if _may_be_pointer(arg, tainted[caller.name], resolve):
                    hit |= set(names[i:]) if isinstance(arg, ast.Starred) or i >= len(names) else {names[i]}
            for k in call.keywords:
                if _may_be_pointer(k.value, tainted[caller.name], resolve):
                    hit |= {a.arg for a in _params(callee)} if k.arg is None else {k.arg}
            if callee.args.vararg is not None and len(call.args) > len(names):
                hit.add(callee.args.vararg.arg)
            if not hit <= may[callee.name]:
                may[callee.name] |= hit
                changed = True
    return may


# --------------------------------------------------------------------------- the rules
def _pointer_types(fn: ast.FunctionDef, tainted: set, resolve: Resolve, parent: dict) -> Found:
    """``X.dtype`` / ``X.type`` of a value that may be a pointer, neither followed by
    ``.element_ty`` nor compared."""
    out: Found = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Attribute) and n.attr in TYPE_ATTRS and _may_be_pointer(n.value, tainted, resolve):
            if _element_type(n, parent):
                continue
            out.append((n.lineno, RULE, f"@triton.jit function '{fn.name}' reads the type of '{ast.unparse(n.value)}', "
                        "which may be a pointer: a pointer's type is read only as '.dtype.element_ty' (an "
                        "integer cast to a pointer type is a raw address)"))
    return out


def _element_type(n: ast.Attribute, parent: dict) -> bool:
    """``X.dtype.element_ty`` (never a pointer: no pointer points to pointers), ``X.type``
    compared, or ``X.type.element_ty`` read only for a property (``.itemsize``, ``.is_fp16()``):
    on a block of pointers ``X.type.element_ty`` and ``X.type.scalar`` are the pointer type."""
    up = parent.get(id(n))
    if isinstance(up, ast.Compare):  # dest.type == src.type: a bool, no type
        return True
    if not (isinstance(up, ast.Attribute) and up.value is n and up.attr in ELEMENT_ATTRS):
        return False
    if n.attr == "dtype":
        return True
    then = parent.get(id(up))
    return isinstance(then, ast.Compare) or (isinstance(then, ast.Attribute) and then.value is up and (
        then.attr in TYPE_PROPERTIES or then.attr.startswith("is_")))


def _pointer_cast(call: ast.Call, tainted: set, resolve: Resolve) -> bool:
    """A cast (``x.to(T)``, ``x.cast(T)``, ``tl.cast(x, T)``, ``dtype=T``) whose target is the
    type (``q.dtype``, ``q.type``), not the element type, of a name that may hold a pointer
    or of any other expression (``tl.load(p).dtype``: not followed, refused)."""
    func = call.func
    targets = [k.value for k in call.keywords if k.arg in CAST_KEYWORDS]
    path = resolve(func)
    if path is None and isinstance(func, ast.Attribute) and func.attr in CAST_METHODS and call.args:
        targets.append(call.args[0])
    elif path and path.startswith("triton.language.") and path.rsplit(".", 1)[-1] in CAST_FUNCTIONS \
            and len(call.args) > 1:
        targets.append(call.args[1])
    for t in targets:
        parents = {id(c): n for n in ast.walk(t) for c in ast.iter_child_nodes(n)}
        for n in ast.walk(t):
            if isinstance(n, ast.Attribute) and n.attr in TYPE_ATTRS:
                up = parents.get(id(n))
                if n.attr == "dtype" and isinstance(up, ast.Attribute) and up.value is n and up.attr in ELEMENT_ATTRS:
                    continue  # p.dtype.element_ty (p.type.element_ty, p.type.scalar may be the pointer type)
                base = n.value
                while isinstance(base, (ast.Attribute, ast.Subscript)):
                    base = base.value
                if not isinstance(base, ast.Name) or base.id in tainted:
                    return True
    return False


def _annotations(fn: ast.FunctionDef, resolve: Resolve, rebound: set) -> Found:
    """A jit parameter's annotation names a constexpr, a scalar type or nothing; ``rebound``:
    the builtin names the candidate binds."""
    out: Found = []
    for a in _params(fn):
        ann = a.annotation
        if ann is None:
            continue
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            ok = not any(s in ann.value.lower() for s in ANNOTATION_REFUSED)
        elif isinstance(ann, ast.Name) and ann.id in SCALAR_BUILTINS:
            ok = ann.id not in rebound
        else:
            path = resolve(ann)
            ok = path is not None and path.startswith("triton.language.") \
                and path.rsplit(".", 1)[-1] not in POINTER_NAMES
        if not ok:
            out.append((ann.lineno, RULE, f"@triton.jit function '{fn.name}' annotates '{a.arg}' with "
                        f"'{ast.unparse(ann)}': annotations name tl.constexpr or a scalar tl type (a pointer "
                        "signature makes an integer argument a raw address)"))
    return out


def _decorators_only(tree: ast.AST, resolve: Resolve, parent: dict, jit_names: set) -> Found:
    """``triton.jit`` / ``autotune`` / ``heuristics`` stand only in a function's decorators, or
    wrap a function already decorated (``triton.autotune(configs=...)(kernel)``)."""
    out: Found = []
    for n in ast.walk(tree):
        if not isinstance(n, (ast.Name, ast.Attribute)) or resolve(n) not in JIT_DECORATORS:
            continue
        up = parent.get(id(n))
        if isinstance(up, ast.Attribute) and up.value is n:
            continue  # part of a longer chain (resolved on its own)
        dec = up if isinstance(up, ast.Call) and up.func is n else n
        holder = parent.get(id(dec))
        if isinstance(holder, (ast.FunctionDef, ast.AsyncFunctionDef)) and dec in holder.decorator_list:
            continue
        if isinstance(holder, ast.Call) and holder.func is dec and _wraps_kernel(holder, jit_names):
            continue
        out.append((n.lineno, RULE, f"'{resolve(n)}' is used only as a decorator or on a @triton.jit function "
                    "(a kernel made by a call has a body no @triton.jit rule reads)"))
    return out


def _wraps_kernel(call: ast.Call, jit_names: set) -> bool:
    """``deco(kernel)``: one argument, a decorated jit function or such a call on one."""
    if len(call.args) != 1 or call.keywords:
        return False
    arg = call.args[0]
    if isinstance(arg, ast.Name):
        return arg.id in jit_names
    return isinstance(arg, ast.Call) and isinstance(arg.func, ast.Call) and _wraps_kernel(arg, jit_names)


def _no_data_ptr(tree: ast.AST, parent: dict) -> Found:
    """No ``data_ptr`` defined by the candidate: a method, a class attribute, an attribute
    stored, a ``setattr``."""
    out: Found = []
    msg = ("defines 'data_ptr': Triton passes any object with a data_ptr to a kernel as a pointer to the "
           "integer it returns (a raw address)")
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "data_ptr" \
                and isinstance(parent.get(id(n)), ast.ClassDef):
            out.append((n.lineno, RULE, msg))
        elif isinstance(n, ast.Attribute) and n.attr == "data_ptr" and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.append((n.lineno, RULE, msg))
        elif isinstance(n, ast.Name) and n.id == "data_ptr" and isinstance(n.ctx, ast.Store) \
                and _class_level(n, parent):
            out.append((n.lineno, RULE, msg))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "setattr" \
                and len(n.args) > 1 and isinstance(n.args[1], ast.Constant) and n.args[1].value == "data_ptr":
            out.append((n.lineno, RULE, msg))
    return out


def _class_level(node: ast.AST, parent: dict) -> bool:
    up = parent.get(id(node))
    while up is not None and not isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        up = parent.get(id(up))
    return isinstance(up, ast.ClassDef)


def _inline_asm(tree: ast.AST, resolve: Resolve) -> Found:
    """``inline_asm_elementwise`` takes its assembly as a string literal with no memory
    operand, call or declaration."""
    out: Found = []
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Call) and _last(n.func, resolve) == INLINE_ASM):
            continue
        asm = n.args[0] if n.args else next((k.value for k in n.keywords if k.arg == "asm"), None)
        if not (isinstance(asm, ast.Constant) and isinstance(asm.value, str)):
            out.append((n.lineno, RULE, f"'{INLINE_ASM}' takes its assembly as a string literal (one built or "
                        "named is not read)"))
            continue
        bad = [s for s in ASM_REFUSED if s in asm.value]
        if bad:
            out.append((n.lineno, RULE, f"'{INLINE_ASM}' with {', '.join(repr(b) for b in bad)} in its assembly: "
                        "inline assembly reads or writes no memory and calls nothing (an integer dereferenced "
                        "there is a raw address)"))
    return out
