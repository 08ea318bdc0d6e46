"""Harness benchmarks on one GPU: repeatability, throughput, agreement with do_bench.

(a) repeatability: each of N candidates evaluated R times by our evaluator; p95 of
    |speedup / median − 1|, next to a KernelBench-style timing measured in the same run
    (mean of 100 event-timed calls after 3 warm-ups, reference and candidate timed
    separately, same inputs reused, no L2 flush).
(b) throughput: candidates per minute over the built-in reference solutions, ours (warm
    worker pool, cached references) vs a naive evaluation that starts one fresh Python
    process per candidate (import, correctness over 5 trials, timing), in the same run.
    ``--per-task N`` gives each task N candidates in a row instead of one per task;
    ``--rl-shape`` an RL step's shape: 8 tasks x 8 candidates of one group, half of them
    duplicates and wrong ones. A batch judges each (task, text) once (its duplicates get
    a copy of the verdict, ``reused``): the mix cycles over the tasks, so past the suite's
    size its candidates repeat; ``--distinct`` gives each a text of its own (a comment
    line), so that every candidate of the mix is judged.
(c) agreement: our clean eager time per task vs ``triton.testing.do_bench`` (median) on
    the same module and inputs.

(d) variants (on request): the widest-spread tasks evaluated under timing variants (one
    or eight placements, no or a longer warm-up, a fixed or an automatic GPU busy-wait
    lead, a longer budget), with per-placement speedups and SM clocks.

Usage: python bench/harness.py [--parts throughput,repeat,agree,variants] [--reps 10] [--cands 10]
                               [--naive 20] [--throughput 50] [--per-task 1] [--rl-shape] [--distinct]
                               [--workers-per-gpu 1,2] [--variants default,no_lead,fill_flush] [--eval FIELD=VALUE] [--out FILE]
Writes bench/results/harness.json (or --out; also $OUT/<name> when OUT is set). The parts
are independent, so two GPUs can run them side by side (CUDA_VISIBLE_DEVICES) and the
JSON files be merged with ``--merge A.json B.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
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

    from davinci_kernel.evaluate.shared.runtime import exec_source as _exec_source

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


def rl_shape_items(pairs, tasks: int = 8, group: int = 8) -> list:
    """An RL step's candidates, group after group: per task, 4 correct sources that differ in
    text (as samples of one kernel do), 2 exact duplicates of the first, and 2 wrong ones (the
    same kernel with its output scaled), interleaved as sampling returns them."""
    step = max(1, len(pairs) // tasks)
    items = []
    for task, src in pairs[::step][:tasks]:
        distinct = [f"# sample {j}\n{src}" for j in range(4)]
        wrong = [distinct[0].replace("class ModelNew(", "class _Sampled(", 1)
                 + f"\n\n# wrong {j}\nclass ModelNew(_Sampled):\n    def forward(self, *args):\n"
                   "        return super().forward(*args) * 1.5\n" for j in range(2)]
        order = [distinct[0], wrong[0], distinct[1], distinct[0], distinct[2], wrong[1], distinct[3], distinct[0]]
        items += [(task, text) for text in order[:group]]
    return items


def p95_dev(xs):
    med = statistics.median(xs)
    devs = sorted(abs(x / med - 1) for x in xs)
    return devs[min(len(devs) - 1, int(round(0.95 * (len(devs) - 1))))]


def part_throughput(ev, tp_items, out: dict) -> None:
    t0 = time.time()
    res = ev.evaluate_many(tp_items)
    ours_s = time.time() - t0
    out["throughput"] = {"ours_candidates": len(tp_items), "ours_seconds": ours_s,
                         "ours_per_min": 60 * len(tp_items) / ours_s, "ours_correct": sum(r.correct for r in res),
                         "ours_reused": sum(bool(r.reused) for r in res),  # duplicates of the batch, judged once
                         "includes": "cold start: worker spawn, reference outputs, eager baselines, Triton JIT"}
    phases: dict = {}
    for r in res:
        for k, v in r.phase_seconds.items():
            phases[k] = phases.get(k, 0.0) + v
    out["throughput"]["phase_seconds_total"] = {k: round(v, 2) for k, v in sorted(phases.items(), key=lambda kv: -kv[1])}
    out["throughput"]["per_task_seconds"] = {f"{i}:{r.task}": round(r.eval_seconds, 2) for i, r in enumerate(res)}
    out["throughput"]["not_correct"] = {f"{i}:{r.task}": [r.error_kind, r.flags, (r.error_msg or "")[:300]]
                                        for i, r in enumerate(res) if not r.correct}
    worker: dict = {}  # the workers' own split of their timing phase (claims, for diagnosis)
    for r in res:
        for k, v in (r.timing_detail.get("phase_ms") or {}).items():
            worker[k] = worker.get(k, 0.0) + v / 1e3
    out["throughput"]["worker_timing_seconds_total"] = {k: round(v, 2) for k, v in worker.items()}
    out["throughput"]["gate_stops"] = sum(g.stops for g in ev._gates._gates.values())  # checks stopped for a timer
    out["throughput"]["flush"] = next((r.timing_detail.get("flush") for r in res if r.timing_detail.get("flush")), None)
    out["throughput"]["lead_us"] = sorted({round(r.timing_detail.get("lead_us") or 0) for r in res})
    # the harness's wall-time check of each worker's timing report: unexplained ms per timed call
    walls = [(r.task, r.timing_detail["wall"], r.timing_detail.get("iters")) for r in res if r.timing_detail.get("wall")]
    out["throughput"]["wall_check"] = [{"task": t, **w, "iters": n,
                                        "unexplained_per_call_us": round(1e3 * w["unexplained_ms"] / (2 * n), 2)}
                                       for t, w, n in walls if n]
    per_call = sorted(x["unexplained_per_call_us"] for x in out["throughput"]["wall_check"])
    if per_call:
        print(f"wall check: unexplained per timed call (us): min {per_call[0]}, median {per_call[len(per_call) // 2]}, "
              f"max {per_call[-1]}", flush=True)
    print(f"ours: {len(tp_items)} candidates in {ours_s:.1f}s; by phase: {out['throughput']['phase_seconds_total']}; "
          f"workers' timing phase: {out['throughput']['worker_timing_seconds_total']}", flush=True)


def part_latency(ev, tp_items, out: dict, n: int = 5) -> None:
    """What a user of ``dvk optimize`` waits for: one candidate at a time on the warm evaluator
    (workers started, references and baselines cached), judged anew (no reused verdict)."""
    secs = []
    for task, src in tp_items[:n]:
        t0 = time.time()
        ev.evaluate(task, src, fresh=True)
        secs.append(time.time() - t0)
    out["throughput"]["warm_latency_s"] = {"p50": round(statistics.median(secs), 3),
                                           "max": round(max(secs), 3), "seconds": [round(s, 3) for s in secs]}
    print(f"warm evaluator, one candidate at a time: p50 {statistics.median(secs):.2f}s over {n}", flush=True)


def part_naive(tp_items, n_naive: int, out: dict) -> None:
    if n_naive <= 0:
        return
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "naive.py"
        script.write_text(NAIVE)
        # its own Triton cache, cold like ours was: kernels built once, then reused across its processes
        env = dict(os.environ, TRITON_CACHE_DIR=str(Path(d) / "triton-cache"))
        files = []
        for i, (_, src) in enumerate(tp_items[:n_naive]):  # the very candidates ours judged
            files.append(Path(d) / f"cand_{i}.py")
            files[-1].write_text(src)
        t0 = time.time()
        for (t, _), cand in zip(tp_items[:n_naive], files):
            subprocess.run([sys.executable, str(script), t.path, str(cand)], capture_output=True, timeout=300, env=env)
        naive_s = time.time() - t0
    n = min(n_naive, len(tp_items))
    tp = out.setdefault("throughput", {})
    tp.update(naive_candidates=n, naive_seconds=naive_s, naive_per_min=60 * n / naive_s)
    if "ours_per_min" in tp:
        tp["ratio"] = tp["ours_per_min"] / tp["naive_per_min"]


def part_repeat(ev, pairs, reps: int, out: dict, save=lambda: None) -> None:
    rows = []
    for t, src in pairs:
        res = [r for r in (ev.evaluate(t, src) for _ in range(reps)) if r.speedup]
        sp = [r.speedup for r in res]
        kb = [kernelbench_style(t, src) for _ in range(reps)]
        row = {"task": t.name, "ours_median": statistics.median(sp) if sp else None,
               "ours_p95_dev": p95_dev(sp) if len(sp) > 1 else None,
               "kb_median": statistics.median(kb), "kb_p95_dev": p95_dev(kb), "ours": sp, "kb": kb,
               "ours_blocks": [r.timing_detail.get("block_speedups") for r in res],
               "ours_clock_mhz": [r.timing_detail.get("clock_mhz") for r in res]}
        rows.append(row)
        print(f"{t.name:45s} ours ±{(row['ours_p95_dev'] or 0) * 100:5.2f}%  "
              f"kernelbench-style ±{row['kb_p95_dev'] * 100:5.2f}%", flush=True)
        _repeat_summary(rows, out)
        save()  # a run cut short keeps the finished rows


VARIANTS = {  # name -> EvalConfig fields: what each evaluation of the variants part changes
    "default": {},
    "no_lead": {"timing_lead_us": 0.0},
    "fill_flush": {"timing_flush": "fill"},
    "lead_from_ref": {"timing_lead_from": "reference"},
    "one_placement": {"timing_placements": 1},
    "no_warmup": {"timing_warmup_ms": 0.0},
    "warmup_1s": {"timing_warmup_ms": 1000.0},
    "lead_100us": {"timing_lead_us": 100.0},
    "placements_8": {"timing_placements": 8},
    "budget_2s": {"timing_budget_s": 2.0, "timing_max_iters": 4000},
    "budget_300ms": {"timing_budget_s": 0.3},
}


def cold_config(device: str = "cuda", **fields):
    """An evaluator config with an empty baseline cache (no torch.compile baseline)."""
    from davinci_kernel.config import EvalConfig

    return EvalConfig(device=device, cache_dir=tempfile.mkdtemp(prefix="dvk-bench-cache-"), baseline_compile=False,
                      **fields)


def part_variants(pairs, reps: int, names: list[str], out: dict, save=lambda: None, device: str = "cuda") -> None:
    """Where does the spread come from? The same candidates under timing variants, each in
    a fresh pool: per evaluation the speedup and its per-placement block speedups (a spread
    inside one evaluation points to memory placement; a spread only between evaluations,
    to the process or the GPU state)."""
    from davinci_kernel.evaluate import Evaluator

    rows = out.setdefault("variants", [])
    for name in names:
        cfg = cold_config(device, **VARIANTS[name])
        with Evaluator(cfg, workers=1) as ev:
            for t, src in pairs:
                res = [r for r in (ev.evaluate(t, src) for _ in range(reps)) if r.speedup]
                sp = [r.speedup for r in res]
                blocks = [r.timing_detail.get("block_speedups") or [] for r in res]
                inside = [max(b) / min(b) - 1 for b in blocks if len(b) > 1 and min(b) > 0]
                row = {"variant": name, "task": t.name, "speedups": sp, "blocks": blocks,
                       "p95_dev": p95_dev(sp) if len(sp) > 1 else None,
                       "max_block_spread": max(inside) if inside else None,
                       "eval_seconds": [r.eval_seconds for r in res],
                       "clock_mhz": [r.timing_detail.get("clock_mhz") for r in res]}
                rows.append(row)
                print(f"{name:14s} {t.name:35s} p95 ±{(row['p95_dev'] or 0) * 100:5.2f}%  "
                      f"within-evaluation block spread {(row['max_block_spread'] or 0) * 100:5.2f}%  "
                      f"speedups {' '.join(f'{x:.3f}' for x in sp)}  clocks {row['clock_mhz']}", flush=True)
                save()


def _repeat_summary(rows: list, out: dict) -> None:
    out["repeatability"] = rows
    ours = [abs(x / r["ours_median"] - 1) for r in rows if r["ours"] for x in r["ours"]]
    kb = [abs(x / r["kb_median"] - 1) for r in rows for x in r["kb"]]
    out["repeatability_summary"] = {
        "ours_p95_dev": sorted(ours)[int(0.95 * (len(ours) - 1))] if ours else None,
        "kernelbench_style_p95_dev": sorted(kb)[int(0.95 * (len(kb) - 1))],
    }


def part_agree(ev, pairs, out: dict) -> None:
    """Our clean eager time (the cached baseline) vs do_bench's median on the same module."""
    import torch
    import triton.testing

    from davinci_kernel.evaluate.shared.runtime import exec_source as _exec_source

    rows = []
    for t, src in pairs:
        if not any(k.startswith(t.hash) for k in ev.baselines._data):
            ev.evaluate(t, src)  # measures and caches the baseline
        key = [k for k in ev.baselines._data if k.startswith(t.hash)]
        if not key:
            continue
        ours_eager = ev.baselines._data[key[0]]["eager_ms"]
        p = _exec_source(t.source, "agree_problem")
        with torch.device("cuda"):
            torch.manual_seed(42)
            m = p.Model(*p.get_init_inputs())
            torch.manual_seed(1)
            x = p.get_inputs()
        with torch.no_grad():
            db = triton.testing.do_bench(lambda m=m, x=x: m(*x), return_mode="median")
        rows.append({"task": t.name, "ours_eager_ms": ours_eager, "do_bench_ms": db, "ratio": ours_eager / db})
    out["agreement"] = rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--cands", type=int, default=10)
    ap.add_argument("--naive", type=int, default=20)
    ap.add_argument("--workers-per-gpu", default="1",
                    help="throughput part: ours with each of these worker counts per GPU, cold each time (e.g. 1,2)")
    ap.add_argument("--throughput", type=int, default=50)
    ap.add_argument("--rl-shape", action="store_true",
                    help="throughput on an RL step's shape instead: 8 tasks x 8 candidates of one group "
                         "(4 distinct correct texts, 2 duplicates, 2 wrong); overrides --throughput/--per-task")
    ap.add_argument("--distinct", action="store_true",
                    help="throughput mix: each candidate a text of its own (a comment line), so none is a "
                         "duplicate judged once")
    ap.add_argument("--per-task", type=int, default=1,
                    help="throughput: candidates per task in a row (1: one per task, cycling over all tasks; "
                         "e.g. 5: five per task over 10 tasks, the shape of an RL step's groups)")
    ap.add_argument("--parts", default="throughput,repeat,agree",
                    help="any of throughput, repeat, agree, variants (timing variants on --variant-tasks)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"variants part: any of {', '.join(VARIANTS)}")
    ap.add_argument("--variant-tasks", default="level1/3_Softmax,level1/4_LayerNorm",
                    help="variants part: task names (the widest spreads in the repeat part)")
    ap.add_argument("--eval", action="append", default=[], metavar="FIELD=VALUE",
                    help="an EvalConfig field for the throughput, repeat and agree parts (e.g. timing_budget_s=0.3)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "harness.json"))
    ap.add_argument("--merge", nargs="+", help="merge these part files into --out and print the table")
    args = ap.parse_args()
    if args.merge:
        out = {}
        for f in args.merge:
            for k, v in json.loads(Path(f).read_text()).items():
                if isinstance(v, dict) and isinstance(out.get(k), dict):
                    out[k].update(v)
                elif k == "command" and k in out:
                    out[k] += " ; " + v
                else:
                    out.setdefault(k, v)
        if "ours_per_min" in out.get("throughput", {}) and "naive_per_min" in out["throughput"]:
            out["throughput"]["ratio"] = out["throughput"]["ours_per_min"] / out["throughput"]["naive_per_min"]
        report(out)
        write(out, Path(args.out))
        return
    parts = set(args.parts.split(","))
    known = {"throughput", "repeat", "agree", "variants"}
    names = [v for v in args.variants.split(",") if v]
    bad = sorted(parts - known) + [v for v in names if v not in VARIANTS]
    bad += [x for x in args.workers_per_gpu.split(",") if x and not (x.isdigit() and 1 <= int(x) <= 16)]
    bad += [f"--per-task {args.per_task}"] if args.per_task < 1 else []
    try:
        fields = _eval_fields(args.eval)
    except ValueError as e:  # ConfigError: names the field, the value and what is allowed
        bad.append(f"--eval: {e}")
        fields = {}
    if bad:
        print(f"harness.py: unknown part, variant, worker count, --per-task or --eval: {', '.join(bad)} (parts: {', '.join(sorted(known))}; "
              f"variants: {', '.join(VARIANTS)}; workers per GPU: 1 to 16; --per-task: 1 or more)", file=sys.stderr)
        sys.exit(2)
    import torch

    from davinci_kernel.evaluate import Evaluator
    from davinci_kernel.tasks import REFERENCE_DIR, candidate_path, load_suite

    tasks = [t for t in load_suite("builtin") if candidate_path(REFERENCE_DIR, t).is_file()]
    pairs = [(t, candidate_path(REFERENCE_DIR, t).read_text()) for t in tasks]
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "date": datetime.date.today().isoformat(), "tasks": len(tasks),
           "os_kernel": platform.release(),  # which sandbox runtime: page faults cost very differently
           "sandbox": __import__("davinci_kernel.evaluate.harness.isolation.sandbox", fromlist=["probe"]).probe().describe(),
           "command": " ".join(["python", *sys.argv])}
    per_gpu = [int(x) for x in args.workers_per_gpu.split(",") if x]
    out["eval_fields"] = fields
    cfg = cold_config(workers_per_gpu=per_gpu[0], **fields)
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="dvk-bench-triton-")  # our workers start cold too
    if args.rl_shape:
        tp_items = rl_shape_items(pairs)
    else:
        tp_items = [pairs[(i // args.per_task) % len(pairs)] for i in range(args.throughput)]
        if args.distinct:
            tp_items = [(t, f"# candidate {i}\n{src}") for i, (t, src) in enumerate(tp_items)]
    def save():
        write(out, Path(args.out))

    # one GPU (pin it with CUDA_VISIBLE_DEVICES): workers = workers per GPU
    with (Evaluator(cfg, workers=per_gpu[0]) if parts & {"throughput", "repeat", "agree"}
          else contextlib.nullcontext()) as ev:
        if "throughput" in parts:
            part_throughput(ev, tp_items, out)
            out["throughput"].update(workers_per_gpu=per_gpu[0], per_task=args.per_task, distinct=args.distinct,
                                     shape="rl_step" if args.rl_shape else "mix")
            out["worker_start"], why = ev.pool.worker_start()
            if why:
                out["worker_start_fallback"] = why
            print(f"workers started: {out['worker_start']}" + (f" ({why})" if why else ""), flush=True)
            part_latency(ev, tp_items, out)
            save()
        if "repeat" in parts:
            part_repeat(ev, pairs[: args.cands], args.reps, out, save)
        if "agree" in parts:
            part_agree(ev, pairs, out)
            save()
    if "throughput" in parts and len(per_gpu) > 1:  # the same candidates, cold again, more workers per GPU
        scaling = out["throughput"].setdefault("by_workers_per_gpu", {
            str(per_gpu[0]): {"per_min": out["throughput"]["ours_per_min"], "seconds": out["throughput"]["ours_seconds"]}})
        for n in per_gpu[1:]:
            os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="dvk-bench-triton-")
            with Evaluator(cold_config(workers_per_gpu=n, **fields), workers=n) as ev_n:
                sub: dict = {}
                part_throughput(ev_n, tp_items, sub)
            scaling[str(n)] = {"per_min": sub["throughput"]["ours_per_min"], "seconds": sub["throughput"]["ours_seconds"],
                               "correct": sub["throughput"]["ours_correct"],
                               "phase_seconds_total": sub["throughput"]["phase_seconds_total"]}
            save()
    if "variants" in parts:
        wanted = set(args.variant_tasks.split(","))
        part_variants([p for p in pairs if p[0].name in wanted], args.reps, names, out, save)
    if "throughput" in parts:
        part_naive(tp_items, args.naive, out)
    report(out)
    write(out, Path(args.out))


def _eval_fields(pairs: list[str]) -> dict:
    """``["timing_budget_s=0.3"]`` -> {"timing_budget_s": 0.3}, parsed, coerced and checked
    as ``eval.<field>=<value>`` overrides of the project's config."""
    from davinci_kernel.config import load_config, parse_overrides

    given = parse_overrides([f"eval.{p}" for p in pairs]).get("eval", {})
    cfg = load_config(overrides=[f"eval.{p}" for p in pairs]).eval
    return {k: getattr(cfg, k) for k in given}


def report(out: dict) -> None:
    print("\n== harness benchmark on", out.get("gpu"), "torch", out.get("torch"))
    s = out.get("repeatability_summary")
    if s:
        print(f"repeatability p95 |dev|: ours {s['ours_p95_dev'] * 100:.2f}%   "
              f"kernelbench-style {s['kernelbench_style_p95_dev'] * 100:.2f}%")
    tp = out.get("throughput")
    if tp and "ratio" in tp:
        print(f"throughput: ours {tp['ours_per_min']:.1f}/min, naive {tp['naive_per_min']:.1f}/min  ->  {tp['ratio']:.2f}x")
    for n, v in (tp or {}).get("by_workers_per_gpu", {}).items():
        vs = f"  ->  {v['per_min'] / tp['naive_per_min']:.2f}x naive" if tp.get("naive_per_min") else ""
        print(f"throughput with {n} worker(s) per GPU: {v['per_min']:.1f}/min{vs}")
    for v in out.get("variants", []):
        print(f"variant {v['variant']:14s} {v['task']:35s} p95 ±{(v['p95_dev'] or 0) * 100:5.2f}%  "
              f"within-evaluation block spread {(v['max_block_spread'] or 0) * 100:5.2f}%")
    for a in out.get("agreement", []):
        print(f"agreement {a['task']:45s} ours {a['ours_eager_ms']:.4f} ms  do_bench {a['do_bench_ms']:.4f} ms  ratio {a['ratio']:.3f}")


def write(out: dict, path: Path) -> None:
    text = json.dumps(out, indent=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], path.name).write_text(text)


if __name__ == "__main__":
    main()
