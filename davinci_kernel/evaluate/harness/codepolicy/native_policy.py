"""The code policy's part for native code: what a candidate may hand to ``load_inline``.

Compiled code runs in the candidate's process with the process's full powers: through the
Python C API (which ``torch/extension.h`` brings in) it could run any Python the policy
refuses, and through libc, the dynamic loader or inline assembly it could reach the
channel, the profiler or the clock. So the C++/CUDA text is held to a declared subset too:

- **Statically known sources.** ``cpp_sources`` and ``cuda_sources`` are string literals,
  names bound once to them, ``+`` joins, f-strings of numeric constants, or lists of these;
  ``load_inline`` is only ever called directly, by keyword or its first three positions,
  never through an alias, ``*args`` or ``**kwargs``. What cannot be read before the run
  cannot be checked, so it is refused.
- **Flags from an allowlist** (``FLAG_PATTERNS``, ``LDFLAGS``): optimisation, language
  standard, architecture, numeric ``-D`` values; no include paths, build folders, linker
  options or forced includes (``is_python_module=False`` registers ops: refused).
- **The preprocessor**: ``#include`` of the headers in ``HEADERS`` only; no token pasting
  (``##``) or digraph ``%:``, which build names the scan would not see; no ``#line``.
- **Identifiers refused** (``DENIED``, ``DENIED_CALLS``), read from the token stream with
  comments and literals removed and line splices joined: the Python C API and pybind11
  beyond ``py::arg``, dynamic loading, system calls, inline assembly, files, processes,
  signals, threads and the environment, the profiler and callbacks (kineto, CUPTI,
  ``RecordFunction``), CUDA events, driver-API module loading, managed and mapped host
  memory, torch's global state and dispatcher registration, ``extern`` beyond
  ``extern __shared__``, and load-time hooks (``constructor`` attributes).

Does not cover: what compiled code does with raw pointers. Native code that finds a
function by address (walking the loader's tables from a pointer it holds) is outside any
source check; docs/guarantees.md lists it among the residuals. The Python side of the
policy is policy.py; this module only reads text and the syntax tree.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Optional

# load_inline's parameters in order, and the ones a candidate may pass.
POSITIONAL = ("name", "cpp_sources", "cuda_sources")
KEYWORDS = frozenset({"name", "cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags",
                      "extra_ldflags", "verbose", "with_cuda", "with_pytorch_error_handling", "is_python_module"})
SOURCES = ("cpp_sources", "cuda_sources")
FLAG_ARGS = ("extra_cflags", "extra_cuda_cflags")

# Compiler flags (whole-string matches). -D takes a number or nothing: a defined name
# standing for a refused identifier would hide it from the scan.
FLAG_PATTERNS = tuple(re.compile(p) for p in (
    r"", r"-O[0-3s]?", r"-std=(c|gnu)\+\+\d\d", r"-DNDEBUG", r"-D[A-Za-z_]\w*(=-?[0-9][0-9.eEfFuUlL]*)?",
    r"-U[A-Za-z_]\w*", r"-v", r"--?use_fast_math", r"-ffast-math", r"-lineinfo", r"-g", r"-w", r"-Wno-[\w-]+",
    r"-Wall", r"-Wextra", r"-m(arch|tune)=native", r"-arch=sm_\d+a?", r"--gpu-architecture=sm_\d+a?",
    r"-gencode=?arch=compute_\d+a?,code=(sm|compute)_\d+a?", r"--expt-relaxed-constexpr", r"--expt-extended-lambda",
    r"-?-extended-lambda", r"--?maxrregcount=\d+", r"-res-usage", r"--resource-usage", r"--restrict",
    r"--?ptxas-options=-v", r"-Xptxas(=|\s)?-(v|O[0-3])", r"-?-ftz=(true|false)", r"-?-prec-(div|sqrt)=(true|false)",
    r"-?-fmad=(true|false)", r"-DTORCH_USE_CUDA_DSA", r"-fPIC", r"-?-diag[-_]suppress=\d+(,\d+)*",
))
LDFLAGS = frozenset({"", "-lcuda", "-lcudart", "-lcublas", "-lcublasLt", "-lcurand", "-lcufft", "-lcusparse"})

# Headers a kernel may include: torch's extension and CUDA headers, CUDA's own, and the C/C++
# standard library headers for math, integer types, containers and algorithms.
HEADERS = frozenset({
    "torch/extension.h", "torch/types.h", "torch/torch.h", "ATen/ATen.h", "ATen/cuda/CUDAContext.h",
    "ATen/cuda/CUDAUtils.h", "ATen/OpMathType.h", "ATen/Dispatch.h", "ATen/native/cuda/Loops.cuh",
    "c10/cuda/CUDAException.h", "c10/cuda/CUDAGuard.h", "c10/cuda/CUDAStream.h", "c10/util/Half.h",
    "c10/util/BFloat16.h", "cuda.h", "cuda_runtime.h", "cuda_runtime_api.h", "cuda_fp16.h", "cuda_bf16.h",
    "cuda_fp8.h", "cuda_pipeline.h", "cuda/pipeline", "cuda/barrier", "cuda/std/limits", "mma.h",
    "cooperative_groups.h", "cooperative_groups/reduce.h", "cooperative_groups/memcpy_async.h", "cub/cub.cuh",
    "cub/block/block_reduce.cuh", "cub/warp/warp_reduce.cuh", "cublas_v2.h", "cublasLt.h", "curand_kernel.h",
    "vector_types.h", "math_constants.h", "device_launch_parameters.h", "stdio.h", "cstdio", "float.h", "cfloat",
    "math.h", "cmath", "stdint.h", "cstdint", "stddef.h", "cstddef", "limits.h", "climits", "assert.h", "cassert",
    "vector", "array", "algorithm", "limits", "type_traits", "utility", "tuple", "numeric", "functional",
    "initializer_list", "cstring", "string.h", "string", "iostream", "sstream",
})

_PREFIXES = ("Py", "_Py", "PY_", "THP", "cupti", "CUPTI", "cudaEvent", "cuEvent", "cudaProfiler", "cuProfiler",
             "cuModule", "cuLibrary", "cudaLibrary", "cuLaunch", "cuGetProcAddress", "cudaGetDriverEntryPoint",
             "cuCtx", "cudaIpc", "cuIpc", "cudaMallocManaged", "cudaMallocHost", "cudaHostAlloc", "cudaHostRegister",
             "cudaHostGetDevicePointer", "cuMemHost", "cuMemAllocManaged", "pthread_", "__NR_", "SYS_",
             "setAllow", "kineto", "Kineto", "TORCH_LIBRARY", "posix_spawn")
_EXACT = frozenset({
    # Python objects and pybind11 beyond declaring arguments
    "module", "module_", "import", "eval", "eval_file", "globals", "locals", "builtins",
    "getattr", "setattr", "hasattr", "delattr", "reinterpret_borrow", "reinterpret_steal",
    "gil_scoped_acquire", "gil_scoped_release", "capsule", "cpp_function", "pyobj", "pyobj_slot", "PyObjectSlot",
    "PyInterpreter", "python",
    # loading code, system calls, assembly, load-time hooks
    "dlopen", "dlmopen", "dlsym", "dlvsym", "dladdr", "dlinfo", "dlerror", "dlclose", "dl_iterate_phdr",
    "syscall", "asm", "__asm", "__asm__", "constructor", "destructor", "ifunc", "weakref", "alias",
    "execl", "execle", "execlp", "execv", "execve", "execvp", "execvpe", "fexecve", "execveat",
    # processes, files, environment, signals, threads
    "system", "popen", "fork", "vfork", "clone", "clone3", "fopen", "fdopen", "freopen", "fmemopen",
    "open_memstream", "FILE", "fstream", "ifstream",
    "ofstream", "filesystem", "getenv", "secure_getenv", "setenv", "putenv", "unsetenv", "environ", "atexit", "at_quick_exit", "signal", "sigaction", "raise", "kill", "ptrace", "prctl",
    "process_vm_readv", "process_vm_writev", "mmap", "munmap", "mprotect", "socket", "ioctl", "fcntl",
    # torch's profiler, callbacks, dispatcher, global state
    "profiler", "RecordFunction", "RECORD_FUNCTION", "Dispatcher", "Library", "jit", "globalContext",
    "ThreadLocalDebugInfo", "cudaDeviceReset", "cuDevicePrimaryCtxReset", "cudaSetDeviceFlags",
})
# Parts of names refused wherever they appear inside a name (families with many members).
_PARTS = ("RecordFunction", "Callback", "callback", "rofil", "kineto", "Kineto", "cupti", "CUPTI", "Python",
          "HostFunc", "Interpreter")
# Library functions (libc, POSIX, Linux) that torch/extension.h's headers declare: refused
# wherever their name stands unqualified (called, passed or taken the address of); a member
# (``r.read()``, ``p->write()``) or ``std::`` name is another function.
DENIED_CALLS = frozenset({
    "open", "openat", "openat2", "creat", "read", "write", "pread", "pwrite", "readv", "writev", "close", "lseek",
    "unlink", "unlinkat", "remove", "rename", "renameat", "link", "linkat", "symlink", "symlinkat", "readlink",
    "readlinkat", "truncate", "ftruncate", "mkdir", "mkdirat", "rmdir", "chmod", "fchmod", "chown", "fchown",
    "lchown", "chdir", "fchdir", "chroot", "access", "faccessat", "mkstemp", "mkdtemp", "mkfifo", "mknod",
    "tmpfile", "tmpnam", "tempnam", "realpath", "opendir", "fdopendir", "readdir", "scandir", "nftw", "ftw",
    "connect", "bind", "listen", "accept", "accept4", "send", "sendto", "recv", "recvfrom", "sendmsg", "recvmsg",
    "socketpair", "sendfile", "splice", "vmsplice", "dup", "dup2", "dup3", "pipe", "pipe2", "select", "pselect",
    "poll", "ppoll", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "eventfd", "signalfd",
    "timerfd_create", "inotify_init", "inotify_init1", "fanotify_init", "memfd_create", "shm_open", "shm_unlink",
    "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semctl", "msgget", "msgsnd", "msgrcv", "msgctl",
    "mq_open", "setns", "unshare", "mount", "umount", "umount2", "pivot_root", "personality", "setrlimit",
    "prlimit", "setuid", "setgid", "seteuid", "setegid", "setreuid", "setregid", "setsid", "setpgid", "getpid",
    "getppid", "gettid", "killpg", "tgkill", "tkill", "sigqueue", "alarm", "pause", "setitimer", "sleep", "usleep",
    "nanosleep", "exit", "_exit", "_Exit", "quick_exit", "abort", "waitpid", "wait", "wait3", "wait4", "waitid",
    "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "perf_event_open", "bpf", "userfaultfd", "keyctl", "add_key",
    "request_key", "sched_setaffinity", "sched_setscheduler", "madvise", "mlock", "mlockall", "brk", "sbrk",
    "__builtin_frame_address", "__builtin_return_address", "__builtin_extract_return_addr",
    # stdio on streams: reading and writing files (a stream comes only from the calls above)
    "fread", "fwrite", "fputs", "fgets", "fputc", "fgetc", "fscanf", "fseek", "fseeko", "ftell", "ftello",
    "rewind", "fclose", "fileno", "setvbuf", "getdents",
})
QUALIFIERS_OK = frozenset({"std"})

_SPLICE = re.compile(r"\\[ \t\f\v]*\r?\n")
_TOKEN = re.compile(r"""
    (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^()\\\s]{0,16})\(.*?\)(?P=delim)")
  | (?P<string>"(?:\\.|[^"\\\n])*")
  | (?P<number>\.?[0-9](?:[eEpP][+-]|'?[0-9A-Za-z_.])*)
  | (?P<char>'(?:\\.|[^'\\\n])*')
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<scope>::)
  | (?P<paste>\#\#|%:%:|%:)
  | (?P<other>\S)
""", re.VERBOSE | re.DOTALL)


_VARIANT = re.compile(r"^(?:_+(?:libc_)?)?(.*?)(?:64|_unlocked|_nocancel)?$")


def base_name(ident: str) -> str:
    """The function a variant spelling stands for: the C library's large-file, internal and
    unlocked variants (``fopen64``, ``_Fork``, ``__libc_fork``, ``fread_unlocked``) are the
    same call as ``fopen``, ``fork``, ``fread``."""
    core = _VARIANT.match(ident).group(1) or ident
    return core[0].lower() + core[1:] if core[:1].isupper() and core[1:].islower() else core


def denied(ident: str) -> bool:
    """Whether an identifier is refused wherever it stands (under any variant spelling)."""
    return any(n in _EXACT or n.startswith(_PREFIXES) or any(p in n for p in _PARTS)
               for n in {ident, base_name(ident)})


def denied_call(ident: str) -> bool:
    """A library call refused where it stands unqualified, under any variant spelling."""
    return ident in DENIED_CALLS or base_name(ident) in DENIED_CALLS


def check_text(text: str) -> list[str]:
    """Why the C++/CUDA source ``text`` is refused: one message per rule broken (empty: allowed)."""
    out: list[str] = []
    text = _SPLICE.sub("", text)  # line splices join what they split (compilers allow blanks before the newline)
    if "??" in text and re.search(r"\?\?[=/'()!<>\-]", text):
        out.append("trigraphs are refused")
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#"):
            out += _directive(s[1:].strip())
    toks = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(text)
            if m.lastgroup not in ("comment", "string", "char", "raw", "number")]
    for i, (kind, tok) in enumerate(toks):
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        prev = toks[i - 1][1] if i else ""
        after = toks[i + 2][1] if i + 2 < len(toks) else ""
        before = toks[i - 2][1] if i > 1 else ""
        if kind == "paste":
            out.append(f"'{tok}' (token pasting or a digraph) is refused: it builds names no check can read")
        elif tok == "\\":
            out.append("a backslash outside a literal (a universal character name) is refused: it spells names "
                       "no check can read")
        elif kind != "ident":
            continue
        elif tok in ("py", "pybind11") and not (nxt == "::" and after in ("arg", "arg_v")) \
                and not (tok == "pybind11" and nxt == ";") and prev != "namespace":
            out.append("pybind11 beyond py::arg is refused: it reaches Python objects")
        elif tok in ("thread", "jthread", "async") and prev == "::" and before == "std":
            out.append(f"std::{tok} is refused in native code (threads)")
        elif tok == "attr" and prev in (".", "->") and nxt == "(":
            out.append("'.attr(...)' is refused in native code (it reaches Python objects)")
        elif tok == "extern" and nxt != "__shared__":
            out.append("'extern' is allowed only as 'extern __shared__': declarations of outside functions are refused")
        elif denied(tok) and not (tok == "module" and prev == "PYBIND11_MODULE"):
            out.append(f"'{tok}' is refused in native code ({_why(tok)})")
        elif denied_call(tok) and prev != "." and (prev, before) != (">", "-") \
                and not (prev == "::" and before in QUALIFIERS_OK):
            out.append(f"'{tok}' is refused in native code unless it names a member or a std:: function "
                       "(a system or library call)")
    return list(dict.fromkeys(out))


_PASS_ON = ("-Xcompiler", "-Xptxas", "-Xcudafe", "--compiler-options", "--ptxas-options")


def _joined(flags: list[str]) -> list[str]:
    """Flags with a pass-on flag (``-Xcompiler``) and the flag it passes joined into one."""
    out: list[str] = []
    for f in flags:
        if out and out[-1].strip() in _PASS_ON:
            out[-1] = f"{out[-1].strip()} {f.strip()}"
        else:
            out.append(f)
    return out


def flag_allowed(flag: str) -> bool:
    """A compiler flag on the allowlist; a pass-on flag (``-Xcompiler -fPIC``, ``-Xcompiler=-O3``)
    when what it passes is allowed."""
    f = flag.strip()
    for p in _PASS_ON:
        if f.startswith(p) and f != p:
            inner = f[len(p):].lstrip("= ").strip()
            return bool(inner) and all(flag_allowed(x) for x in inner.split(","))
    return any(pat.fullmatch(f) for pat in FLAG_PATTERNS)


def _directive(d: str) -> list[str]:
    word = re.match(r"\w*", d).group()
    if word == "include":
        m = re.match(r'include\s*[<"]([^>"]+)[>"]\s*$', d)
        if not m or m.group(1).strip() not in HEADERS:
            return [f"'#{d}' is refused: only the listed torch, CUDA and standard headers may be included"]
    elif word == "line":
        return ["'#line' is refused"]
    elif word not in ("define", "undef", "if", "ifdef", "ifndef", "elif", "else", "endif", "pragma", "error", "warning"):
        return [f"the directive '#{word}' is refused"]
    return []


def _why(tok: str) -> str:
    if tok.startswith(("Py", "_Py", "PY_", "THP")) or tok in ("module", "module_", "import", "eval", "globals",
                                                                 "python"):
        return "the Python C API and pybind11 reach Python objects the policy refuses"
    if "Python" in tok or "Interpreter" in tok:
        return "the Python C API and pybind11 reach Python objects the policy refuses"
    if any(p in tok for p in _PARTS[:8]) or tok in ("RECORD_FUNCTION", "ThreadLocalDebugInfo"):
        return "the profiler observes the candidate"
    if tok.startswith(("cudaEvent", "cuEvent", "cudaProfiler", "cuProfiler")):
        return "the timing events belong to the harness"
    if tok.startswith(("cudaMallocManaged", "cudaMallocHost", "cudaHostAlloc", "cudaHostRegister",
                       "cudaHostGetDevicePointer", "cuMemHost", "cuMemAllocManaged")):
        return "host-mapped memory moves work to the host unseen"
    if tok.startswith(("cuModule", "cuLibrary", "cudaLibrary", "cuLaunch", "cuGetProcAddress",
                       "cudaGetDriverEntryPoint", "cuCtx", "cudaIpc", "cuIpc")):
        return "kernels must be the source's own, launched in its own context"
    if tok.startswith(("TORCH_LIBRARY", "setAllow")) or tok in ("Dispatcher", "Library", "jit", "globalContext"):
        return "torch's dispatcher and global state change what the reference computes"
    return "processes, files, signals, threads, the loader and system calls are off limits"


def _static_value(node: ast.AST, env: Callable[[str], Optional[ast.AST]], depth: int = 0):
    """The value of a source or flag argument when it is known before the run (str, list of
    str, or a number inside an f-string); None when it is not."""
    if depth > 32:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        bound = env(node.id)
        return None if bound is None else _static_value(bound, env, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _static_value(node.left, env, depth + 1), _static_value(node.right, env, depth + 1)
        if isinstance(a, str) and isinstance(b, str):
            return a + b
        if isinstance(a, list) and isinstance(b, list):
            return a + b
        return None
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_static_value(e, env, depth + 1) for e in node.elts]
        return None if any(not isinstance(x, str) for x in items) else items
    if isinstance(node, ast.Dict):
        keys = [_static_value(k, env, depth + 1) if k is not None else None for k in node.keys]
        vals = [_static_value(v, env, depth + 1) for v in node.values]
        if any(not isinstance(x, str) for x in keys + vals):
            return None
        return dict(zip(keys, vals))
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v, ast.FormattedValue) and v.conversion == -1 and v.format_spec is None:
                x = _static_value(v.value, env, depth + 1)
                if not isinstance(x, (int, float)):
                    return None  # only numbers are formatted in: text would hide names
                parts.append(str(x))
            else:
                return None
        return "".join(parts)
    return None


def _module_env(tree: ast.AST, bound_count) -> Callable[[str], Optional[ast.AST]]:
    """Names bound exactly once in the whole source by a plain ``name = value``, and never
    reached through (``name.append(...)``, ``name[0] = ...``), give their value."""
    values: dict[str, ast.AST] = {}
    touched = {n.value.id for n in ast.walk(tree)
               if isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.value, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            values[node.target.id] = node.value
    return lambda name: values.get(name) if bound_count.get(name, 0) == 1 and name not in touched else None


def check_tree(tree: ast.AST, resolve: Callable[[ast.AST], Optional[str]], bound_count) -> list[tuple[int, str]]:
    """(line, message) for each way the candidate's use of ``load_inline`` breaks the policy.
    ``resolve`` maps a name or attribute chain to the dotted name it stands for (policy.py's
    alias resolution); ``bound_count`` counts every binding of each name."""
    env = _module_env(tree, bound_count)
    calls = {id(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Name, ast.Attribute)) or resolve(node) != "torch.utils.cpp_extension.load_inline":
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            continue
        call = calls.get(id(node))
        if call is None:
            found.append((node.lineno, "load_inline may only be called directly (not passed on or aliased)"))
            continue
        found += [(call.lineno, m) for m in _call_problems(call, env)]
    return found


_IDENT = re.compile(r"[A-Za-z_]\w{0,127}")
_DOC = re.compile(r"[^\"\\\n\r]{0,400}")


def _names_problems(key: str, value) -> list[str]:
    """``name`` and ``functions`` are pasted into generated C++ and a build command as they
    are: each name must be an identifier and each docstring plain text without quotes,
    backslashes or line breaks."""
    if key == "name":
        ok = isinstance(value, str) and _IDENT.fullmatch(value)
        return [] if ok else ["load_inline's name must be an identifier known before the run"]
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list):
        ok = all(_IDENT.fullmatch(v) for v in value)
    elif isinstance(value, dict):
        ok = all(_IDENT.fullmatch(k) and _DOC.fullmatch(v) for k, v in value.items())
    else:
        ok = False
    return [] if ok else ["load_inline's functions must be identifiers (a dict's docstrings plain text, no quotes or "
                          "backslashes), known before the run: they are pasted into the generated C++"]


def _call_problems(call: ast.Call, env) -> list[str]:
    out: list[str] = []
    if len(call.args) > len(POSITIONAL) or any(isinstance(a, ast.Starred) for a in call.args) \
            or any(k.arg is None for k in call.keywords):
        return [f"load_inline takes at most its first {len(POSITIONAL)} arguments by position and no *args or "
                "**kwargs (every argument must be read before the run)"]
    given = dict(zip(POSITIONAL, call.args)) | {k.arg: k.value for k in call.keywords}
    for key, value in given.items():
        if key not in KEYWORDS:
            out.append(f"load_inline's '{key}' is refused (allowed: {', '.join(sorted(KEYWORDS))})")
        elif key in SOURCES:
            src = _static_value(value, env)
            if isinstance(src, str):
                src = [src]
            if src is None:
                out.append(f"load_inline's {key} must be known before the run (string literals, names bound once "
                           "to them, + joins, f-strings of numbers)")
                continue
            for text in src:
                out += check_text(text)
        elif key in FLAG_ARGS or key == "extra_ldflags":
            flags = _static_value(value, env)
            if isinstance(flags, str):
                flags = [flags]
            if flags is None:
                out.append(f"load_inline's {key} must be a literal list of flags")
                continue
            for f in _joined(flags):
                ok = f.strip() in LDFLAGS if key == "extra_ldflags" else flag_allowed(f)
                if not ok:
                    out.append(f"the flag {f!r} in {key} is refused (docs/policy.md lists the allowed ones)")
        elif key in ("name", "functions"):
            out += _names_problems(key, _static_value(value, env))
        elif key == "is_python_module" and not (isinstance(value, ast.Constant) and value.value is True):
            out.append("is_python_module must stay True (a library of ops registers them with torch's dispatcher)")
    return out
