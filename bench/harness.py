"""Harness benchmarks on one GPU: repeatability, throughput, agreement with do_bench.

(a) repeatability: each of N candidates evaluated R times by our evaluator; p95 of
    |speedup / median − 1|, next to a KernelBench-style timing measured in the same run
    (mean of 100 event-timed calls after 3 warm-ups, reference and candidate timed
    separately, same inputs reused, no L2 flush).
(b) throughput: candidates per minute over the built-in reference solutions, ours (warm
    worker pool, cached references) vs a naive evaluation that starts one fresh Python
    process per candidate (import, correctness over 5 trials, timing), in the same run.
(c) agreement: our clean eager time per task vs ``triton.testing.do_bench`` (median) on
    the same module and inputs.

Usage: python bench/harness.py [--reps 10] [--cands 10] [--naive 20] [--throughput 50]
Writes bench/results/harness.json (and $OUT/harness.json when OUT is set).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NAIVE = r'''
import sys, time, torch, importlib.util
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m; spec.loader.exec_module(m); return m
p = load(sys.argv[1], "problem"); c = load(sys.argv[2], "cand")
dev = torch.device("cuda")
with torch.device(dev):
    torch.manual_seed(42); init = p.get_init_inputs(); torch.manual_seed(42); ref = p.Model(*init)
    torch.manual_seed(42); new = c.ModelNew(*init)
ok = True
with torch.no_grad():
    for s in range(5):
        with torch.device(dev):
            torch.manual_seed(s); x = p.get_inputs()
        ok &= torch.allclose(ref(*x), new(*x), atol=1e-2, rtol=1e-2)
    def t(f):
        for _ in range(3): f(*x)
        torch.cuda.synchronize(); ts = []
        for _ in range(100):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); f(*x); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
        return sum(ts) / len(ts)
    print(ok, t(ref) / t(new))
'''


def kernelbench_style(task, cand_src, device="cuda"):
    """Reference and candidate timed separately in this process: mean of 100 calls."""
    import torch

    from davinci_kernel.evaluate.worker import _exec_source

    p = _exec_source(task.source, "kb_problem")
    with tempfile.TemporaryDirectory() as d:
        c = _exec_source(cand_src, f"kb_cand_{abs(hash(cand_src))}", os.path.join(d, "cand.py"))
        dev = torch.device(device)
        with torch.device(dev):
            torch.manual_seed(42)
            init = p.get_init_inputs()
            torch.manual_seed(42)
            ref = p.Model(*init)
            torch.manual_seed(42)
            new = c.ModelNew(*init)
            torch.manual_seed(1)
            x = p.get_inputs()

        def t(f):
            with torch.no_grad():
                for _ in range(3):
                    f(*x)
                torch.cuda.synchronize()
                ts = []
                for _ in range(100):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    f(*x)
                    b.record()
                    torch.cuda.synchronize()
                    ts.append(a.elapsed_time(b))
            return sum(ts) / len(ts)

        return t(ref) / t(new)


def p95_dev(xs):
    med = statistics.median(xs)
    devs = sorted(abs(x / med - 1) for x in xs)
    return devs[min(len(devs) - 1, int(round(0.95 * (len(devs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--cands", type=int, default=10)
    ap.add_argument("--naive", type=int, default=20)
    ap.add_argument("--throughput", type=int, default=50)
    args = ap.parse_args()
    import torch
    import triton.testing

    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator
    from davinci_kernel.tasks import REFERENCE_DIR, candidate_path, load_suite

    tasks = [t for t in load_suite("builtin") if candidate_path(REFERENCE_DIR, t).is_file()]
    pairs = [(t, candidate_path(REFERENCE_DIR, t).read_text()) for t in tasks]
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "date": datetime.date.today().isoformat(), "tasks": len(tasks)}
    cache = tempfile.mkdtemp(prefix="dvk-bench-cache-")
    cfg = EvalConfig(device="cuda", cache_dir=cache, baseline_compile=False)

    # (b) throughput, ours: first pass over the candidates (cold: references, baselines, Triton JIT).
    tp_items = [pairs[i % len(pairs)] for i in range(args.throughput)]
    with Evaluator(cfg, workers=1) as ev:
        t0 = time.time()
        res = ev.evaluate_many(tp_items)
        ours_s = time.time() - t0
        out["throughput"] = {"ours_candidates": len(tp_items), "ours_seconds": ours_s,
                             "ours_per_min": 60 * len(tp_items) / ours_s,
                             "ours_correct": sum(r.correct for r in res)}
        print(f"ours: {len(tp_items)} candidates in {ours_s:.1f}s", flush=True)

        # (a) repeatability, ours.
        rep_rows = []
        for t, src in pairs[: args.cands]:
            sp = []
            for _ in range(args.reps):
                r = ev.evaluate(t, src)
                if r.speedup:
                    sp.append(r.speedup)
            kb = [kernelbench_style(t, src) for _ in range(args.reps)]
            row = {"task": t.name, "ours_median": statistics.median(sp) if sp else None,
                   "ours_p95_dev": p95_dev(sp) if len(sp) > 1 else None,
                   "kb_median": statistics.median(kb), "kb_p95_dev": p95_dev(kb), "ours": sp, "kb": kb}
            rep_rows.append(row)
            print(f"{t.name:45s} ours ±{(row['ours_p95_dev'] or 0) * 100:5.2f}%  kernelbench-style ±{row['kb_p95_dev'] * 100:5.2f}%", flush=True)
        out["repeatability"] = rep_rows
        ours_devs = [d for r in rep_rows for d in ([abs(x / r["ours_median"] - 1) for x in r["ours"]] if r["ours"] else [])]
        kb_devs = [abs(x / r["kb_median"] - 1) for r in rep_rows for x in r["kb"]]
        out["repeatability_summary"] = {
            "ours_p95_dev": sorted(ours_devs)[int(0.95 * (len(ours_devs) - 1))] if ours_devs else None,
            "kernelbench_style_p95_dev": sorted(kb_devs)[int(0.95 * (len(kb_devs) - 1))],
        }

        # (c) agreement with do_bench on the clean eager baseline.
        agree = []
        for t, _ in pairs:
            key = [k for k in ev.baselines._data if k.startswith(t.hash)]
            if not key:
                continue
            ours_eager = ev.baselines._data[key[0]]["eager_ms"]
            from davinci_kernel.evaluate.worker import _exec_source

            p = _exec_source(t.source, "agree_problem")
            with torch.device("cuda"):
                torch.manual_seed(42)
                m = p.Model(*p.get_init_inputs())
                torch.manual_seed(1)
                x = p.get_inputs()
            with torch.no_grad():
                db = triton.testing.do_bench(lambda: m(*x), return_mode="median")
            agree.append({"task": t.name, "ours_eager_ms": ours_eager, "do_bench_ms": db, "ratio": ours_eager / db})
        out["agreement"] = agree

    # (b) throughput, naive: one fresh process per candidate.
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "naive.py"
        script.write_text(NAIVE)
        t0 = time.time()
        n = 0
        for t, _ in tp_items[: args.naive]:
            subprocess.run([sys.executable, str(script), t.path, str(candidate_path(REFERENCE_DIR, t))],
                           capture_output=True, timeout=300)
            n += 1
        naive_s = time.time() - t0
    out["throughput"].update(naive_candidates=n, naive_seconds=naive_s, naive_per_min=60 * n / naive_s)
    out["throughput"]["ratio"] = out["throughput"]["ours_per_min"] / out["throughput"]["naive_per_min"]

    print("\n== harness benchmark on", out["gpu"], "torch", out["torch"])
    s = out["repeatability_summary"]
    print(f"repeatability p95 |dev|: ours {s['ours_p95_dev'] * 100:.2f}%   kernelbench-style {s['kernelbench_style_p95_dev'] * 100:.2f}%")
    tp = out["throughput"]
    print(f"throughput: ours {tp['ours_per_min']:.1f}/min, naive {tp['naive_per_min']:.1f}/min  ->  {tp['ratio']:.2f}x")
    for a in agree:
        print(f"agreement {a['task']:45s} ours {a['ours_eager_ms']:.4f} ms  do_bench {a['do_bench_ms']:.4f} ms  ratio {a['ratio']:.3f}")
    text = json.dumps(out, indent=1)
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "harness.json").write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "harness.json").write_text(text)


if __name__ == "__main__":
    main()
