"""The two sides of a speed-of-light bound that need torch: a call's matrix FLOPs by dtype
(from the op profiler's events) and the device's measured peaks.

Covers: ``flops_by_dtype`` (the matrix-product FLOPs of the outermost compute ops, as the
work audit counts them, keyed by their first input's dtype; element-wise work is left to
the byte term of the bound), ``measure_peaks`` (copy bandwidth of a large device buffer and
dense matmul FLOP/s per dtype, best of several event-timed runs after a warm-up), and
``provenance`` (card name, driver, torch version: what a cached measurement is valid for).
Runs in the reference process (never beside a candidate). Does not cover: the floor, the
peak fraction, the verdict or the cache (``harness/lightspeed.py``).
"""

from __future__ import annotations

from .opwork import UNCOUNTED, _flops, formula_flops, outermost_compute

# the profiler's dtype names -> torch's
DTYPE_NAMES = {"float": "float32", "c10::Half": "float16", "c10::BFloat16": "bfloat16", "double": "float64"}
MATMUL_DTYPES = ("float32", "tf32", "float16", "bfloat16")  # tf32: float32 inputs on tensor cores
COPY_BYTES = 1 << 30  # the copied buffer (1 GiB): far beyond any L2
MATMUL_N = 8192  # square operands of the matmul peak


def flops_by_dtype(events, dtypes: dict) -> dict[str, float]:
    """{dtype: FLOPs} of the matrix products among the outermost compute ops (the
    profiler's count or ``formula_flops``; an op counted as ``UNCOUNTED`` is left out: it
    has no honest figure). ``dtypes``: event id -> input dtype names (``audit.event_dtypes``);
    an op whose dtype is unknown counts under "unknown"."""
    out: dict[str, float] = {}
    for e in outermost_compute(events):
        f = max(_flops(e), formula_flops(e))
        if not f > 0 or f >= UNCOUNTED:
            continue
        names = [n for n in dtypes.get(getattr(e, "id", None)) or [] if n in DTYPE_NAMES]
        key = DTYPE_NAMES[names[0]] if names else "unknown"
        out[key] = out.get(key, 0.0) + float(f)
    return out


def provenance(torch, dev) -> dict:
    """What a peak measurement holds for: the card's name, the driver and torch versions."""
    return {"gpu": torch.cuda.get_device_name(dev), "driver": driver_version(), "torch": torch.__version__}


def driver_version() -> str:
    """The NVIDIA kernel driver's version (from /proc), or "?" where it cannot be read."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            first = f.readline()
    except OSError:
        return "?"
    words = first.split()
    for i, w in enumerate(words):
        if w == "Kernel" and i + 2 < len(words) and words[i + 1] == "Module":
            return words[i + 2]
    return next((w for w in words if w[:1].isdigit() and "." in w), "?")


def _best_ms(torch, fn, reps: int) -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return min(times)


def measure_peaks(torch, dev, reps: int = 10) -> dict:
    """{"copy_gbps": GB/s of a device-to-device copy counting the bytes read and written,
    "matmul_tflops": {dtype: dense matmul TFLOP/s}, "l2_bytes": the L2 cache} (each the best of ``reps`` event-timed
    runs after warm-up runs that bring the clock up)."""
    n = COPY_BYTES // 4
    src = torch.empty(n, dtype=torch.float32, device=dev).uniform_()
    dst = torch.empty_like(src)
    for _ in range(20):  # warm-up: the clock leaves idle
        dst.copy_(src)
    ms = _best_ms(torch, lambda a=dst, b=src: a.copy_(b), reps)
    copy_gbps = 2 * COPY_BYTES / (ms * 1e-3) / 1e9
    src = dst = None
    tflops = {}
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for name in MATMUL_DTYPES:
            dt = torch.float32 if name == "tf32" else getattr(torch, name)
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
            x = torch.randn(MATMUL_N, MATMUL_N, device=dev, dtype=dt)
            y = torch.randn(MATMUL_N, MATMUL_N, device=dev, dtype=dt)
            for _ in range(3):
                torch.mm(x, y)
            ms = _best_ms(torch, lambda a=x, b=y: torch.mm(a, b), reps)
            tflops[name] = 2 * MATMUL_N ** 3 / (ms * 1e-3) / 1e12
        x = y = None
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
    torch.cuda.empty_cache()
    l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0)
    return {"copy_gbps": round(copy_gbps, 1), "matmul_tflops": {k: round(v, 1) for k, v in tflops.items()},
            "l2_bytes": l2}
