"""The built-in suite's reference solutions judged on the GPU with intervals, peak fractions
and timing over several shapes (issue 42).

Every built-in task's reference solution (``--candidates reference``) goes through the
harness as any candidate does, each at the task's size plus ``--shapes`` drawn sizes
(``suite/shapes.py``). Before that, the card's peaks (copy bandwidth, dense matmul FLOP/s
per dtype) are measured once by a reference process and cached with their provenance
(``evaluate/harness/lightspeed.py``); they are printed beside the figures NVIDIA publishes
for the card. Per task the JSON holds the speedup and its 95 % interval, the peak fraction
and its floor, the interval's half-width and the shape scores; the suite holds Fast_p and
the geometric mean with their bootstrap intervals and the figures over sizes. Tasks not
started within ``--budget-s`` are left out (and named), so the run stays inside its time
(every task's own size is queued before any drawn size).

    python bench/builtin_stats.py [--shapes 3] [--tasks 'level1/*'] [--budget-s 330] [--out FILE]

Writes ``bench/results/builtin_stats_<card>.json`` (``h100``, ``h200``, ...) and, when OUT is
set, a copy under ``$OUT``.

Published figures (dense, no sparsity), with where they were read:
- H100 SXM5 80 GB: 3.35 TB/s HBM3; 989.4 TFLOP/s BF16/FP16, 494.7 TF32, 66.9 FP32
  (NVIDIA H100 datasheet figures, as tabulated at https://glennklockwood.com/garden/processors/h100).
- H100 PCIe: 2.0 TB/s HBM2e (NVIDIA H100 PCIe product brief PB-11133-001, "greater than 2,000 GB/s").
- H200 SXM 141 GB: 4.8 TB/s HBM3e; the same GH100 compute as the H100 SXM
  (https://www.aiminingco.com/gpu/h200/specs, https://lzwjava.github.io/nvidia-h200-gpu-specs-en).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import queue
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from davinci_kernel.config import EvalConfig  # noqa: E402
from davinci_kernel.files import write_json  # noqa: E402
from davinci_kernel.report.fastp import DEFAULT_PS, fastp_table  # noqa: E402
from davinci_kernel.suite.shapes import scores, size_tasks, suite_shapes  # noqa: E402
from davinci_kernel.tasks import REFERENCE_DIR, load_suite  # noqa: E402
from davinci_kernel.tasks.names import pick_tasks  # noqa: E402

# (name contains, published figures): copy bandwidth GB/s, dense matmul TFLOP/s per dtype
PUBLISHED = (
    ("H200", {"card": "H200 SXM 141 GB", "hbm_gbps": 4800.0,
              "matmul_tflops": {"bfloat16": 989.4, "float16": 989.4, "tf32": 494.7, "float32": 66.9}}),
    ("H100 PCIe", {"card": "H100 PCIe 80 GB", "hbm_gbps": 2000.0,
                   "matmul_tflops": {"bfloat16": 756.0, "float16": 756.0, "tf32": 378.0, "float32": 51.2}}),
    ("H100", {"card": "H100 SXM5 80 GB", "hbm_gbps": 3350.0,
              "matmul_tflops": {"bfloat16": 989.4, "float16": 989.4, "tf32": 494.7, "float32": 66.9}}),
)


def published_for(gpu: str) -> dict | None:
    for key, figs in PUBLISHED:
        if key.lower() in gpu.lower():
            return figs
    return None


def card_tag(gpu: str) -> str:
    for key in ("h200", "h100", "a100", "b200"):
        if key in gpu.lower():
            return key
    return "".join(c for c in gpu.lower() if c.isalnum())[:16] or "gpu"


def peaks_table(measured: dict, published: dict | None) -> list[dict]:
    """Measured beside published, with the measured share of the published figure."""
    rows = [{"what": "copy bandwidth (GB/s, read + write)", "measured": measured.get("copy_gbps"),
             "published": (published or {}).get("hbm_gbps")}]
    for dtype, v in (measured.get("matmul_tflops") or {}).items():
        rows.append({"what": f"dense matmul {dtype} (TFLOP/s)", "measured": v,
                     "published": ((published or {}).get("matmul_tflops") or {}).get(dtype)})
    for r in rows:
        r["share"] = round(r["measured"] / r["published"], 3) if r["measured"] and r["published"] else None
    return rows


def task_row(r) -> dict:
    td = r.timing_detail or {}
    light = td.get("light") or {}
    return {"correct": r.correct, "stage": r.stage, "error_kind": r.error_kind, "flags": r.flags,
            "speedup": r.speedup, "speedup_ci": r.speedup_ci, "peak_fraction": r.peak_fraction,
            "runtime_ms": r.runtime_ms, "ref_runtime_ms": r.ref_runtime_ms,
            "ci_half_width": (td.get("ci") or {}).get("half_width"), "pairs": (td.get("ci") or {}).get("pairs"),
            "floor_ms": light.get("floor_ms"), "bound": light.get("bound"), "bytes": light.get("bytes"),
            "flops": light.get("flops"), "shapes": td.get("shapes"), "warnings": r.warnings,
            "eval_seconds": round(r.eval_seconds, 2)}


def run(tasks, cfg: EvalConfig, shapes: int, budget_s: float, workers: int | None) -> tuple[dict, list[str], dict]:
    """Evaluate every task's reference solution at its own size, then at ``shapes`` drawn
    sizes (each size its own evaluation, spread over the workers); evaluations not started
    within ``budget_s`` are skipped. Returns (task -> EvalResult with its shape scores,
    skipped names, the card's peaks)."""
    from davinci_kernel.evaluate import Evaluator

    done: dict = {}
    skipped: list[str] = []
    t0 = time.monotonic()
    with Evaluator(cfg, workers=workers) as ev:
        slots = getattr(ev.pool, "slots", None) or [cfg.device]
        peaks = ev.trusted.peaks(slots[0]) if ev.on_gpu else None  # measured first, with the GPU alone
        sources = {t.name: (REFERENCE_DIR / f"{t.name}.py").read_text(encoding="utf-8") for t in tasks}
        sized = {t.name: size_tasks(t, shapes, small=not ev.on_gpu, input_seed=cfg.input_seed) for t in tasks}
        items = [(t.name, None, t) for t in tasks]  # every task's own size first
        items += [(t.name, ov, st) for t in tasks for ov, st in sized[t.name]]
        q: queue.Queue = queue.Queue()
        for it in items:
            q.put(it)
        lock = threading.Lock()

        def loop() -> None:
            while True:
                try:
                    name, ov, t = q.get_nowait()
                except queue.Empty:
                    return
                if time.monotonic() - t0 > budget_s:
                    with lock:
                        skipped.append(t.name)
                    continue
                r = ev.evaluate(t, sources[name])
                with lock:
                    done[(name, json.dumps(ov, sort_keys=True))] = r
                    sp = f"{r.speedup:.3f}x {r.speedup_ci}" if r.speedup else "untimed"
                    print(f"  {t.name}: {'ok' if r.correct else r.error_kind or r.flags} {sp} "
                          f"peak {r.peak_fraction}", flush=True)

        threads = [threading.Thread(target=loop, daemon=True) for _ in range(max(1, ev.n_workers))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    results = {}
    for t in tasks:
        main = done.get((t.name, "null"))
        if main is None:
            continue
        got = [(ov, done[(t.name, json.dumps(ov, sort_keys=True))]) for ov, _ in sized[t.name]
               if (t.name, json.dumps(ov, sort_keys=True)) in done]
        main.timing_detail["shapes"] = scores(main, got)
        results[t.name] = main
    return results, skipped, peaks or {}


def fmt(x, spec=".3f") -> str:
    return "—" if x is None else format(x, spec)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", type=int, default=3, help="drawn sizes beside the task's own")
    ap.add_argument("--tasks", default=None, help="task-name patterns, e.g. 'level1/*'")
    ap.add_argument("--budget-s", type=float, default=330.0, help="start no evaluation after this many seconds")
    ap.add_argument("--workers-per-gpu", type=int, default=4)
    ap.add_argument("--out", default=None, help="JSON file (default bench/results/builtin_stats_<card>.json)")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("builtin_stats needs a GPU (intervals and peak fractions are null on a CPU)", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name(0)
    tasks = [t for t in pick_tasks(load_suite("builtin"), args.tasks) if (REFERENCE_DIR / f"{t.name}.py").is_file()]
    cfg = EvalConfig(device="cuda", baseline_compile=False, workers_per_gpu=args.workers_per_gpu)
    t0 = time.monotonic()
    print(f"{gpu}: {len(tasks)} tasks, reference solutions, --shapes {args.shapes}", flush=True)
    results, skipped, peaks = run(tasks, cfg, args.shapes, args.budget_s, None)
    seconds = time.monotonic() - t0

    published = published_for(gpu)
    rows = [r.to_dict() for r in results.values()]
    table = fastp_table(rows, DEFAULT_PS)
    from davinci_kernel.evaluate.shared.roofline import driver_version

    doc = {
        "gpu": gpu, "torch": torch.__version__, "driver": driver_version(),
        "date": dt.datetime.now().isoformat(timespec="seconds"), "command": " ".join(sys.argv),
        "seconds": round(seconds, 1), "shapes": args.shapes, "config": dataclasses.asdict(cfg),
        "ci_method": "95 % stratified percentile bootstrap over timed pairs within placement blocks",
        "peaks": {"measured": peaks, "published": published, "table": peaks_table(peaks, published)},
        "tasks": {name: task_row(r) for name, r in sorted(results.items())},
        "skipped": skipped,
        "fast_p": {str(k): v for k, v in table.items()},
        "fast_p_shapes": suite_shapes(rows),
    }
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"builtin_stats_{card_tag(gpu)}.json"
    write_json(out, doc)
    if os.environ.get("OUT"):
        write_json(Path(os.environ["OUT"]) / out.name, doc)

    print(f"\npeaks of {gpu} (driver {doc['driver']}, torch {torch.__version__}) beside published "
          f"{(published or {}).get('card', 'figures: none known for this card')}:")
    for r in doc["peaks"]["table"]:
        print(f"  {r['what']:<40} measured {fmt(r['measured'], '.1f'):>9}  published {fmt(r['published'], '.1f'):>9}"
              f"  share {fmt(r['share'], '.0%')}")
    print(f"\n{'task':<44} {'speedup':>8} {'95% interval':>18} {'peak frac':>9} {'bound':>8} {'sizes gm':>8}")
    for name, r in doc["tasks"].items():
        ci = r["speedup_ci"]
        ci_s = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "—"
        gm = (r.get("shapes") or {}).get("geomean")
        print(f"{name:<44} {fmt(r['speedup']):>8} {ci_s:>18} {fmt(r['peak_fraction'], '.1%'):>9} "
              f"{r['bound'] or '—':>8} {fmt(gm):>8}")
    allrow = table.get("all", {})
    ci = allrow.get("ci") or {}
    print("\nsuite: " + ", ".join(f"fast_{p:g} {fmt(allrow.get(f'fast_{p:g}'), '.0%')} {ci.get(f'fast_{p:g}')}"
                                  for p in DEFAULT_PS) + f", geomean {fmt(allrow.get('geomean'))} {ci.get('geomean')}")
    if doc["fast_p_shapes"]:
        print("over sizes: " + json.dumps(doc["fast_p_shapes"]))
    if skipped:
        print(f"skipped (time budget): {', '.join(skipped)}")
    print(f"wrote {out} in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
