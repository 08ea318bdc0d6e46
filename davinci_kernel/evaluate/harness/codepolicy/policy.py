"""The code policy: the declared subset of Python a candidate is written in (an allowlist).

Covers: the tables of what a candidate may import and reach (modules, the few ``os``
functions honest build code uses, torch's escape hatches refused by name, triton's public
top level), the rules over the syntax tree that enforce them (imports, reflection, private
and dunder names, frame internals, class bases and dunder methods, assignments into
imported modules, modules used as values, calls inside ``@triton.jit`` bodies), and
``check_policy(tree) -> [Violation]``. Names are resolved through import aliases,
``name = module.attr`` assignments and ``getattr`` with a constant name. The tables are rendered for docs/policy.md by
policy_doc.py.
Does not cover: what the code does at run time (the runtime guards stay, as defence in
depth), the routes from an integer to a pointer beyond the pointer names (pointer_policy.py,
run by ``check_policy``), the text of ``load_inline`` C++/CUDA sources (native_policy.py), or ``str.format``
fields (they read attributes into a string, nothing more).
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from . import native_policy, pointer_policy
from .policy_objects import object_problem
from .policy_tables import (
    _REEXPORTED,
    ATTRS_DENIED,
    BUILTINS_DENIED,
    CLASS_BASES,
    DUNDER_ATTRS,
    DUNDER_METHODS,
    DUNDER_NAMES,
    FRAME_ATTRS,
    IMPORTS,
    JIT_BUILTINS,
    JIT_DECORATORS,
    JIT_METHODS,
    KNOWN_MODULES,
    MODULE_ATTRS,
    OS_ALLOWED,
    POINTER_NAMES,
    REEXPORT_OK,
    REFLECTION,
    TORCH_ALLOWED_UNDER_DENIED,
    TORCH_DENY,
    TRITON_TOP,
)


@dataclass(frozen=True)
class Violation:
    line: int
    rule: str  # import | reflection | private | dunder | frame | class | monkey_patch | module_value | torch | jit ...
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


def allowed_import(module: str) -> bool:
    return module in IMPORTS or any(k.endswith(".*") and (module == k[:-2] or module.startswith(k[:-1]))
                                    for k in IMPORTS)


def _import_names(module: str) -> Optional[frozenset]:
    return IMPORTS[module][1] if module in IMPORTS else None


def path_problem(path: str, partial: bool = False) -> Optional[tuple[str, str]]:
    """(rule, why) when the dotted name ``path`` (resolved from an import) is refused.
    ``partial``: ``path`` is imported, not used (a prefix of an allowed os name will do)."""
    parts = path.split(".")
    for i, seg in enumerate(parts[1:], 1):
        if seg.startswith("_") and not (seg in DUNDER_ATTRS and i == len(parts) - 1):
            return "private", f"'{path}' reaches the private name '{seg}'"
    exempt = path in TORCH_ALLOWED_UNDER_DENIED or any(a.startswith(path + ".") for a in TORCH_ALLOWED_UNDER_DENIED)
    for deny, why in TORCH_DENY.items():
        if (path == deny or path.startswith(deny + ".")) and not exempt:
            return "torch", f"'{path}' is refused: {why}"
    for module, (_, names) in IMPORTS.items():  # a module that allows some of its names allows no other
        rest = path[len(module) + 1:].split(".")[0] if path.startswith(module + ".") else None
        if names is not None and rest and rest not in names and f"{module}.{rest}" not in IMPORTS:
            return "import", f"'{path}' is not allowed (from {module}: {', '.join(sorted(names))})"
    if parts[-1].endswith("Storage"):
        return "torch", f"'{path}' is refused: raw storages"
    for seg in parts[1:]:
        if seg in POINTER_NAMES:
            return "host", f"'{path}' is refused: {ATTRS_DENIED[seg]}"
    for i, seg in enumerate(parts[1:], 1):
        if seg in _REEXPORTED and ".".join(parts[:i + 1]) not in REEXPORT_OK:
            return "reexport", f"'{path}' reaches the module '{seg}' through another module"
    if parts[0] == "triton" and len(parts) > 1 and parts[1] not in TRITON_TOP:
        return "triton", f"'{path}' is not one of triton's allowed names ({', '.join(sorted(TRITON_TOP))})"
    if parts[0] == "os" and len(parts) > 1 and path not in OS_ALLOWED \
            and not (partial and any(a.startswith(path + ".") for a in OS_ALLOWED)):
        return "os", f"'{path}' is not allowed (of os only {', '.join(sorted(OS_ALLOWED))})"
    return None


def check_policy(tree: ast.AST) -> list[Violation]:
    """Every violation of the policy in ``tree`` (a parsed candidate), in line order."""
    v = _Visitor(tree)
    v.run()
    v.found += [Violation(line, "native", msg) for line, msg in native_policy.check_tree(tree, v.resolve, v.bound)]
    jit_fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in v.jit_names and v._is_jit(n)]
    v.found += [Violation(line, rule, msg) for line, rule, msg in pointer_policy.check_tree(tree, v.resolve, jit_fns)]
    return sorted({(x.line, x.message): x for x in v.found}.values(), key=lambda x: (x.line, x.message))


def resolved_paths(tree: ast.AST) -> set[str]:
    """The dotted names every name and attribute chain of ``tree`` stands for, through its
    imports and aliases (``build`` of ``from torch.utils.cpp_extension import load_inline as
    build`` is ``torch.utils.cpp_extension.load_inline``)."""
    v = _Visitor(tree)
    v._imports()
    v._assigned_aliases()
    v.found = []
    return {p for node in ast.walk(tree) if isinstance(node, (ast.Name, ast.Attribute))
            for p in [v.resolve(node)] if p}


def _chain(node: ast.AST) -> Optional[tuple[str, list[str]]]:
    """(head name, attributes) of ``a.b.c`` or ``getattr(a.b, "c")``; None for other expressions."""
    attrs: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            attrs.append(node.attr)
            node = node.value
        elif _const_getattr(node):
            attrs.append(node.args[1].value)
            node = node.args[0]
        elif isinstance(node, ast.Name):
            return node.id, attrs[::-1]
        else:
            return None


def _const_getattr(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str))


_BINDERS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler, ast.MatchAs, ast.MatchStar)


def _bindings(tree: ast.AST) -> Counter:
    """How many times each name is bound anywhere in ``tree`` (definitions, assignment and
    loop targets, parameters, imports, ``except ... as``, match captures)."""
    def bound(n: ast.AST) -> Optional[str]:
        if isinstance(n, ast.alias):
            return (n.asname or n.name).split(".")[0]
        if isinstance(n, ast.Name):
            return None if isinstance(n.ctx, ast.Load) else n.id
        return n.arg if isinstance(n, ast.arg) else getattr(n, "name", None) if isinstance(n, _BINDERS) else None
    return Counter(b for b in map(bound, ast.walk(tree)) if b)


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


class _Visitor:
    def __init__(self, tree: ast.AST):
        self.tree = tree
        self.found: list[Violation] = []
        self.aliases: dict[str, str] = {}  # bound name -> dotted name it stands for
        self.modules: set[str] = set()  # bound names that are modules
        self.parent: dict[int, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parent[id(child)] = node
        self.classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        self.self_private = {t.attr for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
                             for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                             if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                             and t.value.id == "self" and t.attr.startswith("_") and not _is_dunder(t.attr)}

    def add(self, node: ast.AST, rule: str, message: str) -> None:
        self.found.append(Violation(getattr(node, "lineno", 0), rule, message))

    def resolve(self, node: ast.AST) -> Optional[str]:
        c = _chain(node)
        if c is None or c[0] not in self.aliases:
            return None
        return ".".join([self.aliases[c[0]]] + c[1])

    def run(self) -> None:
        self._imports()
        self._assigned_aliases()
        self.jit_names = {n.name for n in ast.walk(self.tree) if isinstance(n, ast.FunctionDef) and self._is_jit(n)}
        self.bound = _bindings(self.tree)
        self._no_shadowing()
        self.host_defs = {n.name for n in ast.walk(self.tree) if isinstance(n, _BINDERS[:3])} - self.jit_names
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute):
                self._attr_name(node, node.attr, node.value)
                if isinstance(node.ctx, (ast.Store, ast.Del)):
                    self._own_store(node, node)
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)) \
                    and isinstance(node.value, ast.Attribute):
                self._own_store(node, node.value)
            elif isinstance(node, ast.Name):
                self._name(node)
            elif isinstance(node, ast.Call):
                self._call(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._function(node)
            elif isinstance(node, ast.ClassDef):
                self._class(node)
            elif isinstance(node, ast.Match):
                self.add(node, "reflection", "match statements are not allowed: a class pattern reads attributes "
                         "by name (case object(x=v)), past every attribute rule")
            if isinstance(node, (ast.Name, ast.Attribute)) or _const_getattr(node):
                self._top_of_chain(node)
        for fn in ast.walk(self.tree):
            if isinstance(fn, ast.FunctionDef) and fn.name in self.jit_names and self._is_jit(fn):
                self._jit_body(fn)

    def _no_shadowing(self) -> None:
        """No binding may take the name of a refused builtin, of reflection or of a dunder (an
        import ``from math import exec``, a ``def getattr``), and imports stand at the top level:
        a name the policy resolves is then what the running code has."""
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not isinstance(self.parent.get(id(node)), ast.Module):
                self.add(node, "import", "imports stand at the module's top level (not inside a function or block)")
        for name in self.bound:
            if name in BUILTINS_DENIED or name in REFLECTION or (_is_dunder(name) and name not in DUNDER_METHODS):
                self.add(self.tree, "shadow", f"the name '{name}' is bound by the candidate: a builtin or dunder "
                         "name cannot be rebound")

    # ------------------------------------------------------------------ imports and aliases
    def _imports(self) -> None:
        allowed = ", ".join(k.rstrip(".*") for k in IMPORTS)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if not allowed_import(a.name):
                        self.add(node, "import", f"import of '{a.name}' is not allowed (allowed: {allowed})")
                    name = a.asname or a.name.split(".")[0]
                    self.aliases[name] = a.name if a.asname else name
                    self.modules.add(name)
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level or not allowed_import(mod):
                    self.add(node, "import", f"import from '{'.' * node.level}{mod}' is not allowed "
                             f"(allowed: {allowed})")
                    continue
                names = _import_names(mod)
                for a in node.names:
                    full = f"{mod}.{a.name}"
                    if a.name == "*":
                        self.add(node, "import", f"'from {mod} import *' hides which names are used")
                    elif names is not None and a.name not in names:
                        self.add(node, "import", f"'{full}' is not allowed (from {mod} only {', '.join(sorted(names))})")
                    elif (p := path_problem(full, partial=True) or object_problem(full)) is not None \
                            and mod != "__future__":
                        self.add(node, p[0], f"import of {p[1]}")
                    self.aliases[a.asname or a.name] = full
                    if full in KNOWN_MODULES or allowed_import(full):
                        self.modules.add(a.asname or a.name)

    def _assigned_aliases(self) -> None:
        """``P = torch.autograd`` and the like: P then stands for the dotted name."""
        for _ in range(3):
            for node in ast.walk(self.tree):
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    path = self.resolve(node.value)
                    for t in targets:
                        if path and isinstance(t, ast.Name) and t.id not in self.modules:
                            self.aliases[t.id] = path

    def _top_of_chain(self, node: ast.AST) -> None:
        parent = self.parent.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return
        if _const_getattr(parent) and parent.args[0] is node:
            return
        path = self.resolve(node)
        if path is None:
            return
        problem = path_problem(path) or object_problem(path)
        if problem:
            self.add(node, problem[0], problem[1])
        ctx = getattr(node, "ctx", ast.Load())
        if isinstance(ctx, (ast.Store, ast.Del)) and isinstance(node, ast.Attribute):
            self.add(node, "monkey_patch", f"assigns or deletes '{path}', an attribute of an imported module")
        elif isinstance(ctx, ast.Load) and (path in KNOWN_MODULES or getattr(node, "id", None) in self.modules) \
                and not (isinstance(parent, ast.Call) and parent.func is node):
            self.add(node, "module_value", f"the module '{path}' is used as a value (only its attributes may be used)")

    # ------------------------------------------------------------------ names, attributes, calls
    def _name(self, node: ast.Name) -> None:
        if node.id in self.aliases and node.id not in BUILTINS_DENIED and node.id not in REFLECTION \
                and not _is_dunder(node.id):
            return
        if _is_dunder(node.id) and node.id not in DUNDER_NAMES:
            self.add(node, "dunder", f"the name '{node.id}' is not allowed (dunder names: only {', '.join(DUNDER_NAMES)})")
        elif isinstance(node.ctx, ast.Load) and node.id in BUILTINS_DENIED:
            self.add(node, "reflection", f"'{node.id}' is not allowed ({BUILTINS_DENIED[node.id]})")
        elif isinstance(node.ctx, ast.Load) and node.id in REFLECTION:
            call = self.parent.get(id(node))
            ok = isinstance(call, ast.Call) and call.func is node and len(call.args) >= 2 \
                and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str)
            if not ok:
                self.add(node, "reflection", f"'{node.id}' is allowed only as a call with a constant attribute name")
            elif node.id in ("setattr", "delattr"):
                self._attr_name(call, call.args[1].value, call.args[0])
                path = self.resolve(call.args[0])
                if path:
                    self.add(call, "monkey_patch", f"{node.id} on '{path}', an imported module or its attribute")
                elif not (isinstance(call.args[0], ast.Name) and call.args[0].id == self._first_param(call)):
                    self.add(call, "monkey_patch", f"{node.id} on '{ast.unparse(call.args[0])}': attributes may be "
                             "set only on the method's own object (self, ctx)")
            else:
                self._attr_name(call, call.args[1].value, call.args[0])

    def _attr_name(self, node: ast.AST, attr: str, base: ast.AST) -> None:
        if _is_dunder(attr):
            if attr not in DUNDER_ATTRS:
                self.add(node, "dunder", f"the attribute '{attr}' is not allowed (dunder attributes: only "
                         f"{', '.join(DUNDER_ATTRS)})")
        elif attr.startswith("_"):
            own = isinstance(base, ast.Name) and base.id == "self" and attr in self.self_private
            if not own:
                self.add(node, "private", f"the private attribute '{attr}' is not allowed (private names: only "
                         "the candidate's own self._x attributes)")
        elif attr in FRAME_ATTRS:
            self.add(node, "frame", f"the attribute '{attr}' reads frame, code or generator internals")
        elif attr in ATTRS_DENIED:
            self.add(node, "host", f"'.{attr}' is not allowed: {ATTRS_DENIED[attr]}")
        elif attr in MODULE_ATTRS and self.resolve(node) is None:
            self.add(node, "module_value", f"'.{attr}' names a module: on an object the policy cannot trace to an "
                     "allowed import (a call's result, a variable) it is refused")

    def _first_param(self, node: ast.AST) -> Optional[str]:
        """The first parameter of the method ``node`` stands in (``self``, ``cls``, an autograd
        Function's ``ctx``): the one object a method may give attributes to; None outside a
        method of one of the candidate's classes."""
        up = self.parent.get(id(node))
        while up is not None and not isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            up = self.parent.get(id(up))
        if not isinstance(up, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                or not isinstance(self.parent.get(id(up)), ast.ClassDef):
            return None
        params = up.args.posonlyargs + up.args.args
        return params[0].arg if params else None

    def _own_store(self, node: ast.AST, target: ast.Attribute) -> None:
        """Attributes are assigned, deleted or stored into only on the method's own object, one
        level deep (``self.w = ...``, ``self.cache[k] = ...``, ``ctx.BLOCK = ...``): never on a
        library object (a kernel's rewriter, a module's table), whose methods the library calls
        later with what the candidate put there."""
        base = target.value
        if isinstance(base, ast.Name) and base.id == self._first_param(node):
            return
        self.add(node, "monkey_patch", f"stores into '{ast.unparse(target)}': attributes may be set only on the "
                 "method's own object, one level deep (self.x, ctx.x), never on another object")

    def _call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "type" and node.func.id not in self.aliases \
                and len(node.args) != 1:
            self.add(node, "reflection", "type() with three arguments builds a class at run time")

    # ------------------------------------------------------------------ definitions
    def _function(self, node: ast.AST) -> None:
        name = node.name
        in_class = isinstance(self.parent.get(id(node)), ast.ClassDef)
        if _is_dunder(name) and not (in_class and name in DUNDER_METHODS):
            where = "a method" if in_class else "a module-level function"
            self.add(node, "dunder", f"defines {where} '{name}' (dunder methods: only {', '.join(DUNDER_METHODS)})")
        if in_class and name in JIT_METHODS:
            self.add(node, "class", f"the method name '{name}' is a triton tensor method (a @triton.jit body could "
                     "call it as Python under the interpreter)")
        for d in node.decorator_list:
            if isinstance(d, ast.Name) and d.id == "property":
                self.add(d, "class", "properties run Python on attribute reads (also inside @triton.jit bodies)")

    def _class(self, node: ast.ClassDef) -> None:
        for b in node.bases:
            path = self.resolve(b)
            ok = (path in CLASS_BASES) or (isinstance(b, ast.Name) and (b.id in self.classes or b.id == "object"))
            if not ok:
                self.add(b, "class", f"class '{node.name}' derives from '{ast.unparse(b)}' (allowed bases: "
                         f"{', '.join(sorted(CLASS_BASES))}, and the candidate's own classes)")
        for k in node.keywords:
            self.add(k, "class", f"class '{node.name}' passes '{k.arg}=' (metaclasses are not allowed)")
        for d in node.decorator_list:
            self.add(d, "class", f"class '{node.name}' is decorated (class decorators can replace the class)")

    # ------------------------------------------------------------------ @triton.jit bodies
    def _is_jit(self, fn: ast.FunctionDef) -> bool:
        return any(self.resolve(d.func if isinstance(d, ast.Call) else d) in JIT_DECORATORS for d in fn.decorator_list)

    def _jit_body(self, fn: ast.FunctionDef) -> None:
        """Under the interpreter a jit body runs as Python: any Python it reaches (a function, a rebound
        builtin, a module-level object's method, a ``key=`` callback) runs with the kernel's blocks."""
        local = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)} | {
            n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        for stmt in fn.body:
            for node in ast.walk(stmt):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                    self.add(node, "jit", f"@triton.jit function '{fn.name}' defines a function or class inside")
                elif isinstance(node, ast.Call) and not self._jit_call_ok(node, local):
                    what = ast.unparse(node.func)[:60]
                    self.add(node, "jit", f"@triton.jit function '{fn.name}' calls '{what}' (kernels may call "
                             "triton.language, the candidate's @triton.jit functions, "
                             f"{', '.join(sorted(JIT_BUILTINS))} (not rebound, no keywords) and tensor methods "
                             "of the kernel's own values)")
                elif isinstance(node, ast.Name) and node.id in self.host_defs and node.id not in local:
                    self.add(node, "jit", f"@triton.jit function '{fn.name}' reaches the Python function or "
                             f"class '{node.id}'")
                elif isinstance(node, ast.keyword) and node.arg == "key":
                    self.add(node, "jit", f"@triton.jit function '{fn.name}' passes a 'key=' callback")
        if self.bound[fn.name] > 1:
            self.add(fn, "jit", f"the @triton.jit function '{fn.name}' is rebound (the name is bound "
                     f"{self.bound[fn.name]} times)")

    def _jit_call_ok(self, call: ast.Call, local: set) -> bool:
        func = call.func
        path = self.resolve(func)
        name = (path or "").rsplit(".", 1)[-1] if path is not None else getattr(func, "attr", None)
        if name in ("reduce", "associative_scan"):  # its combine function runs as Python under the interpreter
            at = 2 if path is not None else 1
            fn = call.args[at] if len(call.args) > at else next((k.value for k in call.keywords
                                                                  if k.arg == "combine_fn"), None)
            if not (isinstance(fn, ast.Name) and fn.id in self.jit_names and self.bound[fn.id] == 1):
                return False
        if path is not None:
            return path == "triton.language" or path.startswith("triton.language.")
        if isinstance(func, ast.Name):
            if func.id in self.jit_names:
                return self.bound[func.id] == 1
            return func.id in JIT_BUILTINS and not self.bound[func.id] and not call.keywords
        if isinstance(func, ast.Attribute) and func.attr in JIT_METHODS:
            base = func.value
            while isinstance(base, (ast.Attribute, ast.Subscript, ast.Call)):
                base = base.func if isinstance(base, ast.Call) else base.value
            return not isinstance(base, ast.Name) or base.id in local or base.id in self.aliases \
                or base.id in self.jit_names or base.id in JIT_BUILTINS
        return False


def render_markdown() -> str:
    """The allowlist as markdown (the generated part of docs/policy.md): policy_doc.py."""
    from .policy_doc import render_markdown as render

    return render()
