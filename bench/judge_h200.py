"""The judge on a GPU: honest kernels still judged correct, and their speedups beside an
independent ``triton.testing.do_bench`` ratio measured in the same run.

For each honest candidate (the built-in suite's reference kernels, and the full-size ReLU
fixture) the evaluator gives its verdict and speedup (every defence on, default
``EvalConfig``); then, in this process, ``do_bench`` (median, L2 cleared between calls)
times the problem's ``Model`` and the candidate's ``ModelNew`` on the same inputs, and
their ratio is printed beside ours. Prints a table; writes JSON (GPU, torch, date, rows)
to ``$OUT/judge_h200.json`` when OUT is set, else ``bench/results/judge_h200.json``.

    python bench/judge_h200.py [--tasks level1/3_Softmax,...] [--workers 4]
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def do_bench_ratio(problem: Path, candidate: Path) -> tuple[float, float, float]:
    """(ratio, Model's ms, ModelNew's ms): median do_bench times, same init seed and inputs."""
    import torch
    import triton.testing

    p, c = _module(problem, "kb_problem"), _module(candidate, "kb_candidate")
    dev = torch.device("cuda")
    with torch.device(dev):
        torch.manual_seed(1)
        init = p.get_init_inputs()
        torch.manual_seed(2)
        ref = p.Model(*init)
        torch.manual_seed(2)
        new = c.ModelNew(*init)
        torch.manual_seed(3)
        x = [a.to(dev) if isinstance(a, torch.Tensor) else a for a in p.get_inputs()]
    with torch.no_grad():
        t_ref = triton.testing.do_bench(lambda: ref(*x), warmup=50, rep=300, return_mode="median")
        t_new = triton.testing.do_bench(lambda: new(*x), warmup=50, rep=300, return_mode="median")
    return t_ref / t_new, t_ref, t_new


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="", help="comma-separated task names (default: all with a reference kernel)")
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    import torch

    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator
    from davinci_kernel.tasks import REFERENCE_DIR, load_suite, load_task_file

    items = []
    wanted = {t for t in args.tasks.split(",") if t}
    for t in load_suite("builtin"):
        ref = REFERENCE_DIR / f"{t.name}.py"
        if ref.exists() and (not wanted or t.name in wanted):
            items.append((t, ref, Path(t.path)))
    relu = ROOT / "tests" / "fixtures" / "tasks" / "relu.py"
    if not wanted or "relu_full" in wanted:
        items.append((load_task_file(relu), ROOT / "tests" / "fixtures" / "legit" / "relu_triton.py", relu))
    t0 = time.time()
    torch.cuda.empty_cache()
    with Evaluator(EvalConfig(device="cuda"), workers=args.workers) as ev:
        results = ev.evaluate_many([(t, path.read_text()) for t, path, _ in items],
                                   progress=lambda i, r: print(f"judged {items[i][0].name}: correct={r.correct} "
                                                               f"speedup={r.speedup} flags={r.flags} "
                                                               f"kind={r.error_kind} {(r.error_msg or '')[:200]!r}",
                                                               flush=True))
    judged_s = time.time() - t0
    rows = []
    for (t, cand, prob), r in zip(items, results):
        try:
            bench, bench_ref_ms, bench_cand_ms = do_bench_ratio(prob, cand) if r.correct else (None, None, None)
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            bench = bench_ref_ms = bench_cand_ms = None
            print(f"{t.name}: do_bench failed: {type(e).__name__}: {e}")
        rows.append({"task": t.name, "correct": r.correct, "flags": r.flags, "error_kind": r.error_kind,
                     "error_msg": (r.error_msg or "")[:300], "speedup": r.speedup, "do_bench_speedup": bench,
                     "agreement": (r.speedup / bench) if (r.speedup and bench) else None,
                     "coverage": r.coverage, "eval_seconds": round(r.eval_seconds, 1), "sandbox": r.sandbox,
                     "judged_inputs": r.judged_inputs,
                     # the harness's own wall time around the timed calls vs the event times (judge.wall_check)
                     "wall": (r.timing_detail or {}).get("wall"), "iters": (r.timing_detail or {}).get("iters"),
                     "cand_ms": r.runtime_ms, "ref_ms": r.ref_runtime_ms,
                     "do_bench_ref_ms": bench_ref_ms, "do_bench_cand_ms": bench_cand_ms})
    print(f"{'task':44s} {'ok':>3s} {'ours':>7s} {'do_bench':>8s} {'ratio':>6s} {'cov':>5s}  flags")
    for row in rows:
        f = (lambda v, n=7: f"{v:{n}.3f}" if isinstance(v, float) else " " * (n - 1) + "-")
        print(f"{row['task']:44s} {'yes' if row['correct'] else 'NO':>3s} {f(row['speedup'])} "
              f"{f(row['do_bench_speedup'], 8)} {f(row['agreement'], 6)} {f(row['coverage'], 5)}  "
              f"{','.join(row['flags']) or row['error_kind'] or ''}")
    agree = [abs(r["agreement"] - 1) for r in rows if r["agreement"]]
    print(f"correct {sum(r['correct'] for r in rows)}/{len(rows)}; within 3 % of do_bench: "
          f"{sum(a <= 0.03 for a in agree)}/{len(agree)}; judged in {judged_s:.0f} s")
    doc = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "date": dt.date.today().isoformat(),
           "workers": args.workers, "judged_seconds": round(judged_s, 1), "rows": rows}
    out = Path(os.environ["OUT"]) / "judge_h200.json" if os.environ.get("OUT") else (
        ROOT / "bench" / "results" / "judge_h200.json")
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
