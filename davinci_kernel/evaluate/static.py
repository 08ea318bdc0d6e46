"""AST checks on a candidate before anything runs.

Covers: syntax, the presence of ``ModelNew``, the kernel backend (Triton, CUDA through
``load_inline``, or none), and the reward-hacking patterns visible in the source:
try/except fallbacks, subclassing the reference, torch.compile, side streams, threads
and processes, ``__torch_function__``/``__torch_dispatch__`` overrides, assignments
into torch/time/builtins (monkey-patching) and frame/heap introspection. Works on the
syntax tree, never on regexes over text, so comments and strings cannot trigger or
hide a hit. Does not cover: what the code does at run time (see worker.py, guards.py);
a determined candidate can hide intent from any static check, which is why every
runtime guard exists too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Optional

_PATCHABLE_ROOTS = {"torch", "time", "triton", "tl", "builtins", "sys", "gc", "F", "nn", "np",
                    "numpy", "os", "davinci_kernel", "inspect", "threading"}
_THREAD_MODULES = {"threading", "_thread", "concurrent"}
_PROCESS_MODULES = {"multiprocessing", "subprocess", "concurrent.futures.process"}
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


def check(source: str) -> StaticReport:
    rep = StaticReport()
    try:
        tree = ast.parse(source)
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

    # Backends and kernels.
    uses_load_inline = False
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
            if name in ("os.fork", "os.system", "os.popen", "os.spawnv", "os.execv", "pty.spawn"):
                rep.flag("subprocess", f"calls {name}")
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
    return rep


def _function_body_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside function bodies (module-level import guards are allowed)."""
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside.update(id(sub) for sub in ast.walk(fn))
    return inside


HARD_STATIC_FLAGS = ("subclasses_reference", "try_except_fallback", "threads", "subprocess",
                     "torch_compile", "side_stream", "monkey_patch", "torch_function_override",
                     "introspection")
