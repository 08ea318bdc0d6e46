"""The code policy's tables (policy_tables.py) as markdown: the generated part of docs/policy.md.

Covers: rendering, nothing else. Does not cover: the rules themselves (policy.py,
pointer_policy.py, native_policy.py).
"""

from __future__ import annotations

from . import native_policy as native
from . import pointer_policy as pointers
from .policy_tables import (
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
    MODULE_ATTRS,
    MODULE_ATTRS_OK,
    OS_ALLOWED,
    POINTER_NAMES,
    REFLECTION,
    TORCH_ALLOWED_UNDER_DENIED,
    TORCH_DENY,
    TRITON_TOP,
)


def render_markdown() -> str:
    """The allowlist as markdown (the generated part of docs/policy.md)."""
    rows = ["| module | for | from-import names |", "|---|---|---|"]
    rows += [f"| `{m}` | {why} | {', '.join(f'`{n}`' for n in sorted(names)) if names else 'any public name'} |"
             for m, (why, names) in IMPORTS.items()]
    deny = [f"- `{k}`: {why}" for k, why in TORCH_DENY.items()]
    attrs = [f"- `.{k}`: {why}" for k, why in ATTRS_DENIED.items()]
    builtins = [f"- `{k}`: {why}" for k, why in BUILTINS_DENIED.items()]
    return "\n".join([
        "### Imports", "", *rows, "",
        f"Of `os`, only: {', '.join(f'`{n}`' for n in sorted(OS_ALLOWED))}.", "",
        f"Of `triton`'s top level, only: {', '.join(f'`{n}`' for n in sorted(TRITON_TOP))}.", "",
        "### torch names refused (each with everything under it)", "", *deny,
        f"- any name ending in `Storage`; under `torch.utils` only {', '.join(sorted(TORCH_ALLOWED_UNDER_DENIED))}",
        "", "### Attributes refused on any object", "", *attrs,
        f"- frame, code, generator and traceback internals: {', '.join(f'`{n}`' for n in sorted(FRAME_ATTRS))}",
        "- a module's name (the standard library's, torch's submodules, the big packages: "
        f"{len(MODULE_ATTRS)} names) on an object the policy cannot trace to an allowed import; "
        f"allowed as tensor or module methods: {', '.join(f'`{n}`' for n in sorted(MODULE_ATTRS_OK))}",
        "", "### Builtins", "", *builtins,
        f"- {', '.join(f'`{n}`' for n in sorted(REFLECTION))}: only with a constant attribute name",
        "- `type` with three arguments", "",
        "### Names, classes and kernels", "",
        f"- dunder names read: {', '.join(f'`{n}`' for n in sorted(DUNDER_NAMES))}; dunder attributes: "
        f"{', '.join(f'`{n}`' for n in sorted(DUNDER_ATTRS))}; private attributes: the candidate's own `self._x`",
        f"- class bases: {', '.join(f'`{n}`' for n in sorted(CLASS_BASES))} and the candidate's own classes; "
        f"dunder methods: {', '.join(f'`{n}`' for n in sorted(DUNDER_METHODS))}; no metaclass, class decorator "
        "or `property`",
        f"- inside `@triton.jit` bodies ({', '.join(f'`{n}`' for n in sorted(JIT_DECORATORS))}): calls to "
        f"`triton.language` (libdevice included), the candidate's other jit functions, "
        f"{', '.join(f'`{n}`' for n in sorted(JIT_BUILTINS))} (never rebound by the candidate, no keyword "
        "arguments), and these methods on the kernel's own values (its parameters and locals, not module-level "
        f"objects): {', '.join(f'`{n}`' for n in sorted(JIT_METHODS))}; no reference to the candidate's other "
        "Python functions or classes, no `key=` callback; a jit function's name is bound once", "",
        *_pointers(), *_native()])


def _pointers() -> list[str]:
    """The pointer rules (pointer_policy.py): no integer becomes a pointer."""
    return [
        "### Pointers (no integer becomes a pointer)", "",
        f"- names that make or are a pointer type, refused as attributes and in imports: "
        f"{', '.join(f'`{n}`' for n in POINTER_NAMES)}",
        "- inside `@triton.jit` bodies, the type (`.dtype`, `.type`) of a value that may be a pointer (a "
        "parameter of a launched kernel, a helper's parameter a call passes one to, and whatever is computed "
        "from one) is read only as `.dtype.element_ty`, as `.type.element_ty` followed by "
        f"{', '.join(f'`.{n}`' for n in sorted(pointers.TYPE_PROPERTIES))} or an `is_` method, or in a "
        "comparison; no cast (`.to`, `.cast`, `tl.cast`, `dtype=`) targets such a value's type",
        "- a jit parameter's annotation is a `triton.language` name, "
        f"{', '.join(f'`{n}`' for n in pointers.SCALAR_BUILTINS)} (not rebound) or a string without "
        f"{', '.join(f'`{n.strip()}`' for n in pointers.ANNOTATION_REFUSED)}",
        "- `triton.jit`, `triton.autotune`, `triton.heuristics` only as decorators or on a decorated jit "
        "function",
        "- no `data_ptr` defined by the candidate (a method, a class attribute, an attribute stored, `setattr`)",
        f"- `{pointers.INLINE_ASM}`: its assembly a string literal without "
        f"{', '.join(f'`{n}`' for n in pointers.ASM_REFUSED)}", ""]


def _native() -> list[str]:
    """The native part: load_inline's arguments, headers, flags and refused names."""
    def names(xs) -> str:
        return ", ".join(f"`{x}`" for x in sorted(xs))
    return [
        "### Native code (`load_inline` sources)", "",
        "- `load_inline` is called directly, with its first three arguments by position at most and no "
        f"`*args`/`**kwargs`; arguments allowed: {names(native.KEYWORDS)} (`is_python_module` stays True)",
        "- sources are known before the run: string literals, names bound once to them, `+` joins, "
        "f-strings of numbers, lists of these",
        f"- headers: {names(native.HEADERS)}",
        "- compiler flags (whole-flag patterns; `-Xcompiler`, `-Xptxas` and the like pass on an allowed flag): "
        + ", ".join(f"`{p.pattern}`" for p in native.FLAG_PATTERNS if p.pattern),
        f"- linker flags: {names(x for x in native.LDFLAGS if x)}",
        "- the preprocessor: no `##` token pasting, no `%:` digraphs, no trigraphs, no `#line`, no backslash "
        "outside a literal (universal character names); "
        "other directives as usual",
        f"- names refused anywhere: {names(native._EXACT)}; names starting with {names(native._PREFIXES)}; "
        f"names containing {names(native._PARTS)}",
        f"- library functions refused wherever they stand unqualified (a member or `std::` name is another "
        f"function): {names(native.DENIED_CALLS)}",
        "- `py::`/`pybind11::` beyond `py::arg`, `.attr(...)`, `std::thread`/`std::jthread`/`std::async`, "
        "`extern` other than `extern __shared__`", ""]
