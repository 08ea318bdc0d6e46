"""AST checks on a candidate before anything runs.

Covers: syntax, the presence of ``ModelNew``, the kernel backend (Triton, CUDA through
``load_inline``, or none), and the reward-hacking patterns visible in the source:
try/except fallbacks, subclassing the reference, torch.compile, side streams, threads
and processes, ``__torch_function__``/``__torch_dispatch__`` overrides, assignments
into torch/time/builtins (monkey-patching), dispatcher registration (``torch.library``,
or ``TORCH_LIBRARY`` in a ``load_inline`` source: ``monkey_patch``), frame/heap
introspection, process creation however the function is reached (``os.fork`` called,
aliased or passed on), and reaching what no kernel needs (``forbidden_import``: the harness
package, ``torch._C``, ``torch.utils._python_dispatch``, ``ctypes``/``cffi``/``numpy.ctypeslib``,
also through ``__import__``/``importlib.import_module`` with a constant name, and the
methods that hand a tensor's memory to host code: DLPack, raw storages, ``apply_``/``map_``;
``proc_access``: a string
constant naming a ``/proc`` path). Module aliases (``import torch as t``, ``from torch
import library``) and ``getattr`` with a constant name resolve to the dotted names they
stand for. Works on the syntax tree, never on regexes over text, so comments and strings
(other than ``/proc`` paths and a CUDA source's own text) cannot trigger or hide a hit.
Does not cover: what the code does at run time (see candidate.py, judge.py); names built
at run time (``"lib" + "rary"``, ``exec``) are not followed: a determined candidate can
hide intent from any static check, which is why every runtime guard exists too.
"""

from __future__ import annotations

import ast
import posixpath
from dataclasses import dataclass, field
from typing import Optional

from ....pysource import parse as parse_source
from .policy import check_policy, resolved_paths

NATIVE_BUILDER = "torch.utils.cpp_extension"  # load_inline, load: the candidate's C++/CUDA is built here

_PATCHABLE_ROOTS = {"torch", "time", "triton", "tl", "builtins", "sys", "gc", "F", "nn", "np",
                    "numpy", "os", "davinci_kernel", "inspect", "threading"}
_THREAD_MODULES = {"threading", "_thread", "concurrent"}
_PROCESS_MODULES = {"multiprocessing", "subprocess", "concurrent.futures.process"}
# Modules (and everything under them) no kernel needs; importing or reaching one is
# ``forbidden_import``, with the reason shown.
_FORBIDDEN = {
    "davinci_kernel": "the harness package (candidates must not reach the judge's code)",
    "torch._C": "torch's C++ internals",
    "torch.utils._python_dispatch": "torch's dispatch-mode internals (can intercept every torch op)",
    "ctypes": "raw memory access and C calls", "_ctypes": "raw memory access and C calls",
    "cffi": "raw memory access and C calls", "_cffi_backend": "raw memory access and C calls",
    "numpy.ctypeslib": "raw memory access and C calls",
}
# Methods that hand a tensor's memory to code outside torch (DLPack capsules, raw
# storages, a Python function per element): work done there is seen by no torch-level
# audit and no GPU profile, and no kernel needs them. Reaching one is ``forbidden_import``.
_HOST_HANDOFF = {"__dlpack__": "a DLPack capsule of a tensor's memory", "from_dlpack": "DLPack import",
                 "to_dlpack": "DLPack export", "_to_dlpack": "DLPack export", "_to_dlpack_versioned": "DLPack export",
                 "untyped_storage": "a tensor's raw storage", "_typed_storage": "a tensor's raw storage",
                 "apply_": "a Python function applied per element", "map_": "a Python function applied per element",
                 "map2_": "a Python function applied per element"}
# Functions that start processes, however they are reached (called, aliased, passed on).
_PROCESS_FUNCTIONS = {f"os.{n}" for n in ("fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp",
                                          "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp",
                                          "spawnvpe", "execl", "execle", "execlp", "execlpe", "execv", "execve",
                                          "execvp", "execvpe")} | {"pty.spawn", "pty.fork"}
# Dispatcher registration: an override of an ATen op lives in C++, outside every Python
# snapshot, and changes the reference's own results. Flagged as ``monkey_patch``.
_DISPATCHER = ("torch.library", "torch._library", "torch._custom_ops", "torch._custom_op",
               "torch.ops.load_library")
_DYNAMIC_IMPORT = {"__import__", "builtins.__import__", "importlib.import_module", "importlib.__import__"}
_INTROSPECTION = {("gc", "get_objects"), ("gc", "get_referrers"), ("gc", "get_referents"),
                  ("sys", "_getframe"), ("inspect", "currentframe"), ("inspect", "stack"),
                  ("sys", "settrace"), ("sys", "setprofile"), ("sys", "modules")}


@dataclass
class StaticReport:
    ok: bool = True  # parsed and defines ModelNew
    error_kind: Optional[str] = None
    error_msg: Optional[str] = None
    backend: str = "torch"  # triton | cuda | torch (no custom kernel found)
    kernels: list[str] = field(default_factory=list)  # @triton.jit names / CUDA __global__ names
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # why each flag was raised

    def flag(self, name: str, why: str) -> None:
        if name not in self.flags:
            self.flags.append(name)
            self.notes.append(f"{name}: {why}")


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _root(node: ast.AST) -> str:
    return _dotted(node).split(".", 1)[0]


def _is_triton_jit(dec: ast.AST) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    name = _dotted(target)
    return name in ("triton.jit", "jit", "triton.autotune", "autotune", "triton.heuristics", "heuristics")


def _cuda_kernel_names(source: str) -> list[str]:
    names = []
    marker = "__global__"
    pos = source.find(marker)
    while pos != -1:
        rest = source[pos + len(marker):pos + 400]
        head = rest.split("(", 1)[0].split()
        if head:
            names.append(head[-1].lstrip("*&"))
        pos = source.find(marker, pos + 1)
    return names


def check(source: str, policy: bool = True) -> StaticReport:
    """The report on ``source``. ``policy``: also enforce the code policy (policy.py), raising
    ``policy_violation``; off only for trusted sources (a problem's own code in a self-check)."""
    rep = StaticReport()
    try:
        tree = parse_source(source)
    except SyntaxError as e:
        rep.ok = False
        rep.error_kind = "syntax_error"
        rep.error_msg = f"line {e.lineno}: {e.msg}"
        return rep

    classes = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    if "ModelNew" not in classes:
        rep.ok = False
        rep.error_kind = "no_modelnew"
        rep.error_msg = "the candidate must define a class named ModelNew (an nn.Module)"
        return rep

    # Backends and kernels: native code is whatever reaches torch's C++ extension builder,
    # under any name (an alias is the same function).
    uses_load_inline = any(p == NATIVE_BUILDER or p.startswith(NATIVE_BUILDER + ".")
                           for p in resolved_paths(tree))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(_is_triton_jit(d) for d in node.decorator_list):
            rep.kernels.append(node.name)
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name.endswith("load_inline") or name.endswith("cpp_extension.load"):
                uses_load_inline = True
    if uses_load_inline:
        rep.backend = "cuda"
        for const in ast.walk(tree):
            if isinstance(const, ast.Constant) and isinstance(const.value, str) and "__global__" in const.value:
                rep.kernels += _cuda_kernel_names(const.value)
    elif rep.kernels:
        rep.backend = "triton"

    # Reference subclassing: ModelNew derives from Model (or another class deriving from it).
    def derives_from_model(cls: ast.ClassDef, seen=()) -> bool:
        for b in cls.bases:
            bname = _dotted(b).split(".")[-1]
            if bname == "Model":
                return True
            if bname in classes and bname not in seen and derives_from_model(classes[bname], seen + (bname,)):
                return True
        return False

    if derives_from_model(classes["ModelNew"]):
        rep.flag("subclasses_reference", "ModelNew derives from the reference Model")

    in_functions = _function_body_nodes(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            if id(node) in in_functions:
                rep.flag("try_except_fallback", f"try/except at line {node.lineno}: a kernel must not fall back on failure")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for m in mods:
                top = m.split(".")[0]
                if top in _THREAD_MODULES or m in _THREAD_MODULES:
                    rep.flag("threads", f"imports {m}")
                if top in _PROCESS_MODULES or m in _PROCESS_MODULES:
                    rep.flag("subprocess", f"imports {m}")
                if m in ("torch._dynamo", "torch._inductor") or m.startswith("torch._inductor"):
                    rep.flag("torch_compile", f"imports {m}")
                if isinstance(node, ast.ImportFrom) and m == "torch" and any(a.name == "compile" for a in node.names):
                    rep.flag("torch_compile", "imports torch.compile")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            last = name.split(".")[-1]
            if name == "torch.compile" or name.startswith("torch._dynamo") or name.startswith("torch._inductor"):
                rep.flag("torch_compile", f"calls {name} at line {node.lineno}")
            if last in ("Stream", "ExternalStream") and "cuda" in name or name in ("torch.cuda.stream", "torch.cuda.set_stream"):
                rep.flag("side_stream", f"uses {name} at line {node.lineno}; all work must run on the current stream")
            if name == "setattr" and node.args and _root(node.args[0]) in _PATCHABLE_ROOTS:
                rep.flag("monkey_patch", f"setattr on {_dotted(node.args[0])} at line {node.lineno}")
            if name in ("torch.set_default_dtype", "torch.set_float32_matmul_precision", "torch.use_deterministic_algorithms"):
                rep.flag("monkey_patch", f"changes global torch state with {name} at line {node.lineno}")
            parts = name.split(".")
            if len(parts) >= 2 and (parts[-2], parts[-1]) in _INTROSPECTION:
                rep.flag("introspection", f"calls {name} at line {node.lineno}")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and _root(sub) in _PATCHABLE_ROOTS and _dotted(sub).count(".") >= 1:
                        rep.flag("monkey_patch", f"assigns {_dotted(sub)} at line {node.lineno}")
        elif isinstance(node, ast.FunctionDef) and node.name in ("__torch_function__", "__torch_dispatch__"):
            rep.flag("torch_function_override", f"defines {node.name}: outputs must be plain tensors")
        elif isinstance(node, ast.Attribute) and _dotted(node) in ("sys.modules",):
            rep.flag("introspection", f"reads sys.modules at line {node.lineno}")
    _forbidden_checks(tree, rep, uses_load_inline)
    if policy:
        _policy_check(tree, rep)
    return rep


def _policy_check(tree: ast.AST, rep: StaticReport, shown: int = 6) -> None:
    """``policy_violation``, its note naming the line and the rule of each violation."""
    found = check_policy(tree)
    if found:
        more = f"; and {len(found) - shown} more" if len(found) > shown else ""
        rep.flag("policy_violation", "; ".join(map(str, found[:shown])) + more)


def _under(name: str, prefixes) -> Optional[str]:
    """The prefix (a dotted module path) ``name`` is or lies under, or None."""
    for p in prefixes:
        if name == p or name.startswith(p + "."):
            return p
    return None


def _is_proc_path(value) -> bool:
    """A string (or bytes) constant that is a /proc path: another process's memory,
    environment, command line or file descriptors ("//proc" and "/./proc" included)."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str) or not value.lstrip().startswith("/"):
        return False
    return ("/" + posixpath.normpath(value.strip()).lstrip("/")).startswith("/proc")


def _forbidden_checks(tree: ast.AST, rep: StaticReport, cuda_source: bool) -> None:
    """forbidden_import, proc_access and dispatcher registration (monkey_patch)."""
    aliases: dict[str, str] = {}  # a bound name -> the dotted module path it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname})
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names if a.name != "*"})

    def resolved(expr: ast.AST) -> str:
        """The dotted name of a Name.attr.attr chain with its head's alias expanded; "" for
        any other expression (a chain on a call's result names no module)."""
        parts = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return ""
        return ".".join([aliases.get(expr.id, expr.id)] + parts[::-1])

    def module_hit(mod: str, how: str, line: int) -> None:
        hit = _under(mod, _FORBIDDEN)
        if hit:
            rep.flag("forbidden_import", f"{how} {mod} at line {line}: {_FORBIDDEN[hit]}")
        if _under(mod, _DISPATCHER):
            rep.flag("monkey_patch", f"{how} {mod} at line {line}: registering dispatcher ops changes "
                     "what torch itself computes")

    def name_hit(name: str, line: int) -> None:
        parts = name.split(".")
        if parts[0] == "torch" and "_C" in parts:
            rep.flag("forbidden_import", f"uses {name} at line {line}: {_FORBIDDEN['torch._C']}")
        else:
            module_hit(name, "uses", line)
        process_hit(name, line)

    def process_hit(name: str, line: int) -> None:
        if name in _PROCESS_FUNCTIONS:
            rep.flag("subprocess", f"uses {name} at line {line}")

    def attr_hit(attr: str, line: int) -> None:
        if attr in _HOST_HANDOFF:
            rep.flag("forbidden_import", f"uses .{attr} at line {line}: {_HOST_HANDOFF[attr]} hands a tensor's "
                     "memory to code outside torch, where no audit sees the work")

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for a in node.names:
                module_hit(a.name, "imports", line)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            module_hit(node.module, "imports", line)
            for a in node.names:
                module_hit(f"{node.module}.{a.name}", "imports", line)
                process_hit(f"{node.module}.{a.name}", line)
                attr_hit(a.name, line)
        elif isinstance(node, ast.Attribute):
            name_hit(resolved(node), line)
            attr_hit(node.attr, line)
        elif isinstance(node, ast.Constant):
            if _is_proc_path(node.value) or (cuda_source and isinstance(node.value, str) and '"/proc' in node.value):
                rep.flag("proc_access", f"names the /proc path {str(node.value)[:40]!r} at line {line}: "
                         "other processes' memory and environment are off limits")
            if cuda_source and isinstance(node.value, str) and "TORCH_LIBRARY" in node.value:
                rep.flag("monkey_patch", f"the CUDA source registers dispatcher ops (TORCH_LIBRARY) at line {line}")
        if not isinstance(node, ast.Call):
            continue
        fn = resolved(node.func)
        if fn in ("getattr", "builtins.getattr") and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str):
            attr_hit(node.args[1].value, line)
            if resolved(node.args[0]):
                name_hit(f"{resolved(node.args[0])}.{node.args[1].value}", line)
        elif fn in _DYNAMIC_IMPORT and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            module_hit(node.args[0].value, "imports", line)


def _function_body_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside function bodies (module-level import guards are allowed)."""
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside.update(id(sub) for sub in ast.walk(fn))
    return inside


HARD_STATIC_FLAGS = ("subclasses_reference", "try_except_fallback", "threads", "subprocess",
                     "torch_compile", "side_stream", "monkey_patch", "torch_function_override",
                     "introspection", "forbidden_import", "proc_access", "policy_violation")
