"""Which GPU kernels a candidate's forward launched, and how much of the time was its own.

Covers: a torch.profiler pass over a few candidate calls (kernel times, and how many
streams they ran on, from each GPU activity's device resource id); each device kernel is
classified as *custom* (the candidate's Triton or CUDA kernels) or *library* (ATen,
cuBLAS, cuDNN, CUTLASS, torch.compile's generated kernels, memcpy/memset); time
coverage = custom time / all kernel time (the paper's ``time_coverage``). Also the
CPU-side estimate used when no GPU profile exists: the share of the reference's work
(flops + elements written) that the candidate left to torch ops. Does not cover:
deciding whether low coverage is a failure (guards.py does).
"""

from __future__ import annotations

import re

# Names of kernels that come from torch and the libraries it calls. Our candidates'
# kernels are plain identifiers (Triton) or plain C++ names (load_inline).
_LIBRARY = re.compile(
    r"(at::|at_cuda_detail|native::|c10::|cublas|cutlass|cudnn|xmma|nvjet|cask_|cub::|thrust::|"
    r"flash::|pytorch_flash|fmha|^(sm\d\d_|ampere_|hopper_|volta_|turing_)|^Memcpy|^Memset|"
    r"^triton_(poi|red|per|tem)_|implicit_convolve|gemv2T_kernel|gemvNSP|splitKreduce|"
    r"^dot_kernel|ncclKernel|elementwise_kernel|reduce_kernel<)")


def is_library_kernel(name: str) -> bool:
    return bool(_LIBRARY.search(name))


def profile_kernels(C, dev, fn, args, calls: int = 3, top: int = 8) -> dict:
    """Kernel table and time coverage of ``fn(*args)`` over a few calls (CUDA only)."""
    torch = C.torch
    from torch.profiler import ProfilerActivity, profile

    with C.no_grad():
        fn(*args)
        C.sync(dev)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                fn(*args)
            C.sync(dev)
    kernels: dict[str, dict] = {}
    streams: set = set()  # the device resource of each GPU activity is its stream
    for evt in prof.events():
        if getattr(evt, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        streams.add(getattr(evt, "device_resource_id", None))
        t = getattr(evt, "device_time", None)
        if t is None:
            t = getattr(evt, "cuda_time", 0.0)
        k = kernels.setdefault(evt.name, {"time_us": 0.0, "calls": 0})
        k["time_us"] += float(t or 0.0)
        k["calls"] += 1
    total = sum(k["time_us"] for k in kernels.values())
    custom = sum(k["time_us"] for n, k in kernels.items() if not is_library_kernel(n))
    rows = sorted(kernels.items(), key=lambda kv: -kv[1]["time_us"])[:top]
    return {
        "coverage": (custom / total) if total > 0 else None,
        "custom_kernels": sum(1 for n in kernels if not is_library_kernel(n)),
        "total_ms_per_call": total / 1e3 / calls,
        "streams": len(streams - {None}),
        "top": [{"name": n[:120], "time_ms": k["time_us"] / 1e3 / calls, "custom": not is_library_kernel(n),
                 "calls": max(1, k["calls"] // calls)} for n, k in rows],
    }


def work_coverage(ref_work: float | None, cand_torch_work: float | None) -> float | None:
    """Share of the reference's work not done by torch ops in the candidate (CPU estimate)."""
    if not ref_work or cand_torch_work is None:
        return None
    return max(0.0, 1.0 - min(1.0, cand_torch_work / ref_work))
