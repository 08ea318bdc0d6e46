"""`dvk bench` over several GPUs of one host: throughput scaling and per-GPU timing agreement.

Phase 1 runs one ``dvk bench --suite builtin --candidates reference`` per GPU at the same
time (``CUDA_VISIBLE_DEVICES=i``), each with a fresh HOME so that no cache (Triton builds,
reference outputs, eager baselines) is shared: the wall time of each is the one-GPU time,
and the same kernel's speedup measured on every GPU gives the agreement. Phase 2 runs one
``dvk bench`` over all GPUs (one worker per GPU, the embedded default), fresh HOME again:
its wall time against phase 1's gives the scaling. Prints a table; writes JSON to --out
(and ``$OUT/multi_gpu.json``). Not a test.

    python bench/multi_gpu.py [--gpus 2] [--compile] [--out bench/results/multi_gpu_h200x2.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start_bench(gpus: list[int], out_dir: Path, compile_: bool) -> tuple[subprocess.Popen, float]:
    home = Path(tempfile.mkdtemp(prefix="dvk-home-"))
    env = dict(os.environ, HOME=str(home), CUDA_VISIBLE_DEVICES=",".join(map(str, gpus)),
               PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    cmd = [sys.executable, "-m", "davinci_kernel.cli", "bench", "--suite", "builtin", "--candidates", "reference",
           "--out", str(out_dir), "--json", "--compile" if compile_ else "--no-compile"]
    log = open(out_dir.with_suffix(".log"), "w")
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT), time.time()


def read(out_dir: Path) -> dict:
    rows = [json.loads(x) for x in (out_dir / "results.jsonl").read_text().splitlines() if x.strip()]
    return {r["task"]: r for r in rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: all visible)")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile baselines")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "multi_gpu.json"))
    args = ap.parse_args()
    import torch

    n = args.gpus or torch.cuda.device_count()
    if n < 2:
        sys.exit("multi_gpu.py needs at least 2 visible GPUs")
    work = Path(tempfile.mkdtemp(prefix="dvk-multi-"))

    # phase 1: one bench per GPU, all at once
    procs = [start_bench([i], work / f"gpu{i}", args.compile) for i in range(n)]
    single_s = []
    for p, t0 in procs:
        p.wait()
        single_s.append(time.time() - t0)
    per_gpu = [read(work / f"gpu{i}") for i in range(n)]
    # phase 2: one bench over all GPUs
    p, t0 = start_bench(list(range(n)), work / "all", args.compile)
    p.wait()
    all_s = time.time() - t0
    together = read(work / "all")

    tasks = sorted(per_gpu[0])
    agree = []
    for t in tasks:
        sp = [g.get(t, {}).get("speedup") for g in per_gpu]
        if all(sp) and all(g[t].get("correct") for g in per_gpu):
            mid = statistics.median(sp)
            agree.append({"task": t, "speedups": sp, "max_dev": max(abs(s / mid - 1) for s in sp)})
    n_cand = len(tasks)
    devs = sorted(a["max_dev"] for a in agree)
    out = {
        "gpu": torch.cuda.get_device_name(0), "gpus": n, "torch": torch.__version__,
        "date": dt.date.today().isoformat(), "command": " ".join(["python", *sys.argv]),
        "candidates": n_cand, "compile_baselines": args.compile,
        "single_gpu_seconds": single_s, "all_gpus_seconds": all_s,
        "single_gpu_per_min": [60 * n_cand / s for s in single_s], "all_gpus_per_min": 60 * n_cand / all_s,
        "scaling": statistics.mean(single_s) / all_s,
        "correct": {"per_gpu": [sum(r.get("correct", False) for r in g.values()) for g in per_gpu],
                    "all_gpus": sum(r.get("correct", False) for r in together.values())},
        "devices_used_all_gpus": sorted({r.get("device") for r in together.values() if r.get("device")}),
        "agreement": agree,
        "agreement_max_dev": devs[-1] if devs else None,
        "agreement_within_2pct": sum(d <= 0.02 for d in devs),
    }
    print(f"\n{n}x {out['gpu']}  ({n_cand} reference candidates, cold caches)")
    print(f"  one GPU : {', '.join(f'{s:.1f}s' for s in single_s)}  ->  {statistics.mean(out['single_gpu_per_min']):.1f}/min")
    print(f"  {n} GPUs : {all_s:.1f}s  ->  {out['all_gpus_per_min']:.1f}/min   scaling {out['scaling']:.2f}x")
    print(f"  correct : per GPU {out['correct']['per_gpu']}, all GPUs {out['correct']['all_gpus']}")
    print(f"  agreement: {out['agreement_within_2pct']}/{len(agree)} tasks within 2 %, worst {100 * (out['agreement_max_dev'] or 0):.2f} %")
    for a in agree:
        print(f"    {a['task']:44s} " + "  ".join(f"{s:6.3f}x" for s in a["speedups"]) + f"   {100 * a['max_dev']:5.2f} %")
    text = json.dumps(out, indent=1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "multi_gpu.json").write_text(text)
        for d in [*(f"gpu{i}" for i in range(n)), "all"]:
            try:
                Path(os.environ["OUT"], f"multi_{d}.log").write_text((work / f"{d}.log").read_text()[-20000:])
            except OSError:
                pass


if __name__ == "__main__":
    main()
