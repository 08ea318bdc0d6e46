"""The code policy's tables: what a candidate may import and reach (see ``policy.py``,
which enforces them, and ``policy_doc.py``, which renders them for docs/policy.md).

Covers the data only: modules and the names a from-import may take, the few ``os``
functions honest build code uses, triton's public top level, torch's escape hatches and
attributes refused by name with why, builtins refused, the dunder and class rules' sets,
and what a ``@triton.jit`` body may call. Does not cover: the rules (``policy.py``).
"""

from __future__ import annotations

import sys
import types
from typing import Optional

# Modules a candidate may import: module -> (what it is for, names a from-import may take or None for any).
# A module listed with a trailing ".*" allows its submodules too.
IMPORTS: dict[str, tuple[str, Optional[frozenset]]] = {
    "torch": ("tensors, torch ops for the parts a kernel does not cover", None),
    "torch.nn": ("nn.Module and layers", None),
    "torch.nn.functional": ("functional ops", None),
    "torch.nn.init": ("parameter initialisation", None),
    "torch.autograd": ("custom backward passes", frozenset({"Function"})),
    "torch.utils.cpp_extension": ("building CUDA sources", frozenset({"load_inline"})),
    "triton": ("jit, autotune, heuristics, Config, cdiv, next_power_of_2", None),
    "triton.language.*": ("the kernel language, libdevice (triton.language.extra...) included", None),
    "math": ("scalar math", None),
    "typing": ("annotations", frozenset({"Optional", "List", "Tuple", "Dict", "Union", "Any", "Sequence", "Callable",
                                         "Iterable", "Type", "Final", "Literal", "TYPE_CHECKING"})),
    "__future__": ("annotations", None),
    "os": ("only os.path's pure functions and reading the environment (build paths)", None),
}
# Every use of an ``os`` name must be one of these (full dotted name).
OS_ALLOWED = frozenset({"os.path.join", "os.path.dirname", "os.path.basename", "os.path.abspath", "os.path.exists",
                        "os.path.isdir", "os.path.isfile", "os.path.splitext", "os.path.expanduser",
                        "os.environ.get", "os.getenv"})
# triton's top level: only these names (the rest compile, load or drive kernels outside the kernel language).
TRITON_TOP = frozenset({"jit", "autotune", "heuristics", "Config", "cdiv", "next_power_of_2", "language",
                        "CompilationError", "OutOfResources"})
# torch names refused, with why (a name and everything under it).
TORCH_DENY: dict[str, str] = {
    "torch.compile": "compiles kernels the candidate did not write",
    "torch.compiler": "compiles kernels the candidate did not write",
    "torch.jit": "scripts or traces code into other kernels",
    "torch.fx": "traces and regenerates code", "torch.export": "traces and regenerates code",
    "torch.package": "loads code from archives",
    "torch.library": "registers dispatcher ops (changes what torch computes)",
    "torch.ops": "reaches dispatcher ops by name",
    "torch.classes": "reaches registered C++ classes by name",
    **{n: "the profiler the audit uses" for n in ("torch.profiler", "torch.autograd.profiler",
                                                   "torch.autograd.profiler_util")},
    "torch.autograd.graph": "saved-tensor and graph hooks",
    **{f"torch.cuda.{n}": "CUDA graphs replay work outside the launches seen"
       for n in ("graph", "graphs", "CUDAGraph", "make_graphed_callables")},
    "torch.cuda.jiterator": "compiles kernels from strings at run time",
    "torch.cuda.memory": "allocator hooks and history",
    "torch.cuda.profiler": "the profiler the audit uses",
    "torch.cuda.nccl": "collectives",
    "torch.cuda.Stream": "side streams", "torch.cuda.ExternalStream": "side streams",
    "torch.cuda.stream": "side streams", "torch.cuda.set_stream": "side streams", "torch.Stream": "side streams",
    "torch.cuda.CUDAPluggableAllocator": "replaces the allocator",
    "torch.cuda.change_current_allocator": "replaces the allocator",
    "torch.save": "files and pickle", "torch.load": "files and pickle", "torch.from_file": "files",
    "torch.serialization": "files and pickle",
    "torch.from_dlpack": "hands memory to host code",
    "torch.frombuffer": "makes a tensor of host memory (values computed in Python come back unseen)", "torch.utils": "utilities no kernel needs "
                                                                   "(torch.utils.cpp_extension.load_inline excepted)",
    "torch.hub": "downloads code", "torch.multiprocessing": "processes", "torch.distributed": "processes, sockets",
    "torch.overrides": "__torch_function__ machinery", "torch.futures": "callbacks that run after a call returns",
    "torch.monitor": "event handlers", "torch.storage": "raw storages",
    "torch.set_default_dtype": "global torch state", "torch.set_default_device": "global torch state",
    "torch.set_float32_matmul_precision": "global torch state", "torch.use_deterministic_algorithms": "global torch state",
    "torch.set_num_threads": "global torch state", "torch.set_flush_denormal": "global torch state",
    "torch.ao": "quantized ops (packed weights, work outside the ops the audit weighs)",
    "torch.quantization": "quantized ops (packed weights, work outside the ops the audit weighs)",
    "torch.get_device_module": "returns a module as a value (what is reached through it escapes the policy)",
    "torch.nested": "nested tensors record no shapes: their work cannot be counted",
    **{f"torch.nn.modules.module.register_module_{h}": "a hook on every module, the reference timed beside the "
       "candidate included" for h in ("forward_hook", "forward_pre_hook", "full_backward_hook",
                                      "full_backward_pre_hook", "backward_hook", "buffer_registration_hook",
                                      "module_registration_hook", "parameter_registration_hook")},
    **{f"torch.sparse{s}": "sparse layouts record no dense shapes: their work cannot be counted"
       for s in ("", "_coo_tensor", "_csr_tensor", "_csc_tensor", "_bsr_tensor", "_bsc_tensor", "_compressed_tensor")},
}
TORCH_ALLOWED_UNDER_DENIED = frozenset({"torch.utils.cpp_extension.load_inline"})
# Names that make a pointer type (refused as attributes and in imported paths).
# pi32_t is a ready-made pointer type (triton.language's int32 pointer).
POINTER_NAMES = ("pointer_type", "str_to_ty", "int_to_ptr", "inttoptr", "create_int_to_ptr",
                 "pi32_t")  # a tuple: the docs list them in order
# Attribute names refused on any object, with why.
ATTRS_DENIED: dict[str, str] = {
    "numpy": "hands a tensor to numpy (host compute no audit sees)",
    "tolist": "hands a tensor's values to Python (host compute no audit sees)",
    "storage": "a tensor's raw storage", "untyped_storage": "a tensor's raw storage",
    "apply_": "a Python function per element", "map_": "a Python function per element",
    "map2_": "a Python function per element", "share_memory_": "shares memory with other processes",
    "record_stream": "side streams", "to_dlpack": "hands memory to host code", "from_dlpack": "hands memory to host code",
    "cell_contents": "closure internals",
    "get_capture_scope": "a kernel's globals, modules included, as a value",
    "handle": "an interpreted kernel's block as a raw numpy array (host compute)",
    **{n: "makes a pointer type: an integer cast to a pointer is a raw address (CPU interpreter: any byte "
          "of the worker)" for n in POINTER_NAMES},
    **{n: "a Triton kernel's internals: the interpreter runs whatever they hold"
       for n in ("rewriter", "ast_transformer", "rewritten_fn", "pre_run_hooks", "kernel_cache", "cache_key")},
    **{n: "sparse and nested layouts record no dense shapes: their work cannot be counted"
       for n in ("to_sparse", "to_sparse_csr", "to_sparse_csc", "to_sparse_bsr", "to_sparse_bsc", "to_padded_tensor")},
}
# Attribute names that are module names (the standard library's, torch's public submodules,
# the big packages): refused on any object the policy cannot resolve to an allowed import,
# since a value obtained at run time (a call's result) may be a module or hold modules
# (``torch.get_device_module("cuda").importlib``). The few that are also tensor or module
# methods (``x.cuda()``, ``x.chunk(2)``) stay allowed.
TORCH_SUBMODULES = frozenset({
    "accelerator", "amp", "ao", "autograd", "backends", "compiler", "contrib", "cpu", "cuda", "distributed",
    "distributions", "export", "fft", "func", "functional", "futures", "fx", "hub", "jit", "library", "linalg",
    "masked", "monitor", "mps", "mtia", "multiprocessing", "nativert", "nested", "nn", "numa", "onnx", "optim",
    "overrides", "package", "profiler", "quantization", "quasirandom", "random", "return_types", "serialization",
    "signal", "sparse", "special", "storage", "testing", "torch_version", "types", "utils", "version", "xpu",
    "ops", "classes", "cpp_extension", "graphs", "memory", "nccl", "jiterator", "streams"})
MODULE_ATTRS_OK = frozenset({"chunk", "cpu", "cuda", "select", "trace", "xpu", "mtia"})
MODULE_ATTRS = frozenset(
    n for n in (set(sys.stdlib_module_names) | TORCH_SUBMODULES
                | {"torch", "triton", "numpy", "davinci_kernel", "language", "runtime", "tl", "np", "F", "nn"})
    if not n.startswith("_") and n not in MODULE_ATTRS_OK)
# Frame, code, generator and traceback internals (attribute names of those objects).
FRAME_ATTRS = frozenset(n for t in (types.FrameType, types.CodeType, types.GeneratorType, types.CoroutineType,
                                    types.AsyncGeneratorType, types.TracebackType)
                        for n in dir(t) if n[:2] in ("f_", "co", "gi", "cr", "ag", "tb") and "_" in n[:3])
# Builtins refused, with why.
BUILTINS_DENIED: dict[str, str] = {
    **{n: "reflection" for n in ("vars", "globals", "locals", "dir")},
    **{n: "runs code from strings" for n in ("exec", "eval", "compile")},
    "open": "files", "input": "reads stdin", "breakpoint": "debugger", "help": "interactive help",
    "exit": "ends the process", "quit": "ends the process", "memoryview": "raw memory",
    "id": "an object's address (raw memory, with a pointer made from it)",
}
REFLECTION = frozenset({"getattr", "setattr", "delattr", "hasattr"})  # only with a constant attribute name
DUNDER_NAMES = frozenset({"__name__"})  # dunder names a candidate may read
DUNDER_ATTRS = frozenset({"__init__"})  # super().__init__(), nn.Module.__init__(self)
DUNDER_METHODS = frozenset({"__init__"})  # dunder methods a candidate class may define
CLASS_BASES = frozenset({"torch.nn.Module", "torch.autograd.Function", "object"})  # plus the candidate's own classes
KNOWN_MODULES = frozenset({
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.nn.utils", "torch.nn.modules",
    "torch.autograd", "torch.cuda", "torch.backends", "torch.linalg", "torch.fft", "torch.special",
    "torch.testing", "torch.random", "torch.sparse", "torch.func", "torch.amp", "torch.cpu", "torch.cuda.amp",
    "torch.distributions", "torch.utils.cpp_extension", "triton", "triton.language", "triton.language.extra",
    "triton.language.extra.cuda", "triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice",
    "triton.language.math", "triton.language.core", "math", "os", "os.path", "typing", "__future__"})
# Segments of a dotted name that reach another module through a re-export (torch.os, F.torch, torch.sys...).
REEXPORT_OK = frozenset({"torch.random", "torch.select", "torch.chunk", "torch.trace", "torch.signal", "torch.types",
                         "triton.language.math", "triton.language.random"})
_REEXPORTED = (frozenset(sys.stdlib_module_names) | {"numpy", "np", "torch", "triton", "cffi", "sympy"}) - {"math"}
# Inside @triton.jit bodies: calls to triton.language, the candidate's other jit functions, these
# builtins, and these methods on local values.
JIT_BUILTINS = frozenset({"range", "min", "max", "len", "int", "float", "bool", "abs"})  # not rebound, no keywords
JIT_METHODS = frozenset({
    "T", "abs", "advance", "argmax", "argmin", "associative_scan", "atomic_add", "atomic_and", "atomic_cas",
    "atomic_max", "atomic_min", "atomic_or", "atomic_xchg", "atomic_xor", "broadcast_to", "cast", "cdiv", "ceil",
    "cos", "cumprod", "cumsum", "erf", "exp", "exp2", "expand_dims", "flip", "floor", "gather", "histogram", "item",
    "log", "log2", "logical_and", "logical_or", "max", "min", "permute", "ravel", "reduce", "reduce_or", "reshape",
    "rsqrt", "sigmoid", "sin", "softmax", "sort", "split", "sqrt", "sqrt_rn", "store", "sum", "to", "trans", "view",
    "xor_sum", "load", "is_fp16", "is_bf16", "is_fp32", "is_fp64", "is_floating", "is_int", "with_element_ty"})
JIT_DECORATORS = frozenset({"triton.jit", "triton.autotune", "triton.heuristics"})
