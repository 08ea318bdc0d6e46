"""Per-skill speedup on CUDA: each seed skill's example vs. its eager PyTorch equivalent.

For every seed skill, the ``bench`` block of its markdown source names the
example's launcher, an eager reference (a lambda) and inputs at a realistic size
(``dev`` is the CUDA device). The script loads the example as a module (its
check block does not run), checks the launcher against the reference on those
inputs (allclose atol=rtol=1e-2), and times both with CUDA events: warm-up, an
L2 flush between iterations, median of the timed iterations, the two sides
interleaved. Writes bench/results/skills_speedup.json; feed it back with
``python -m davinci_kernel.skills.seed_build --speedups bench/results/skills_speedup.json``.

Usage (GPU machine): python bench/skills_speedup.py [--iters 50] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load_example(skill, workdir: Path):
    from davinci_kernel.skills.markdown import example_blocks

    code = "\n\n".join(c for lang, c in example_blocks(skill.content) if lang in ("python", "py"))
    path = workdir / f"skill_{skill.name}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(f"skill_{skill.name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _time_pair(fn_a, fn_b, iters: int, warmup: int, flush):
    import torch

    for _ in range(warmup):
        fn_a()
        fn_b()
    torch.cuda.synchronize()
    ta, tb = [], []
    for _ in range(iters):
        for fn, acc in ((fn_a, ta), (fn_b, tb)):
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            acc.append(s.elapsed_time(e))
    return statistics.median(ta), statistics.median(tb)


def _outputs(x):
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)) or hasattr(x, "_fields"):
        return [t for item in x for t in _outputs(item)]
    return []


def measure(skill, extra: dict, workdir: Path, iters: int, warmup: int, flush) -> dict:
    import torch

    bench = extra.get("bench") or {}
    row = {"name": skill.name, "task": bench.get("task"), "correct": False, "speedup": None}
    try:
        mod = _load_example(skill, workdir)
        dev = torch.device("cuda")
        inputs = eval(bench["inputs"], {"torch": torch, "dev": dev})  # noqa: S307 - our own seed files
        ref = eval(bench["reference"], {"torch": torch})  # noqa: S307
        launcher = getattr(mod, bench["launcher"])
        with torch.no_grad():
            got, exp = launcher(*inputs), ref(*inputs)
            pairs = list(zip(_outputs(got), _outputs(exp)))
            row["correct"] = bool(pairs) and all(
                a.shape == b.shape and torch.allclose(a.float(), b.float(), atol=1e-2, rtol=1e-2) for a, b in pairs)
            t_kernel, t_ref = _time_pair(lambda: launcher(*inputs), lambda: ref(*inputs), iters, warmup, flush)
        row.update(kernel_ms=round(t_kernel, 4), eager_ms=round(t_ref, 4),
                   speedup=round(t_ref / t_kernel, 3) if t_kernel > 0 else None,
                   shapes=[list(t.shape) for t in inputs if isinstance(t, torch.Tensor)],
                   dtype=str(next((t.dtype for t in inputs if isinstance(t, torch.Tensor)), "")))
    except Exception as e:  # noqa: BLE001 - one failing skill must not stop the run
        row["error"] = "".join(traceback.format_exception_only(type(e), e)).strip()[-500:]
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "skills_speedup.json")
    args = ap.parse_args()
    import torch
    import triton

    from davinci_kernel.skills.seed_build import load_sources

    if not torch.cuda.is_available():
        sys.exit("skills_speedup.py needs a CUDA GPU (CPU examples are checked by tests/test_skills_seed.py)")
    flush = torch.empty(256 * 1024 * 1024 // 4, device="cuda", dtype=torch.float32)
    rows = []
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"), "iters": args.iters,
              "results": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dvk_speedup_") as tmp:
        sys.path.insert(0, tmp)
        for skill, extra, _ in load_sources():
            if args.only and skill.name not in args.only:
                continue
            t0 = time.perf_counter()
            row = measure(skill, extra, Path(tmp), args.iters, args.warmup, flush)
            row["seconds"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
            args.out.write_text(json.dumps(result, indent=2))  # a run cut short keeps the finished skills
            torch.cuda.empty_cache()
    args.out.write_text(json.dumps(result, indent=2))
    ok = [r for r in rows if r["correct"] and r["speedup"]]
    if ok:
        geo = statistics.geometric_mean(r["speedup"] for r in ok)
        print(f"{len(ok)}/{len(rows)} correct; geomean speedup over eager {geo:.2f}x; wrote {args.out}")


if __name__ == "__main__":
    main()
