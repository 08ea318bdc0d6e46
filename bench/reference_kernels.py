"""The built-in suite's reference Triton kernels against eager PyTorch and torch.compile (GPU).

For every built-in task that has a reference solution: build Model and ModelNew at full size
on CUDA with the same seed, check the outputs agree (atol = rtol = 1e-2), time eager,
torch.compile (default mode) and the reference with ``triton.testing.do_bench`` (median, L2
cleared between runs), print a table and write JSON to ``bench/results/reference_kernels.json``
(and ``$OUT/reference_kernels.json`` when OUT is set). A task that fails is reported and skipped.
A run limited by --level or --tasks replaces only its own rows in an existing JSON file, so the
levels can be measured in separate runs.

    python bench/reference_kernels.py [--level N] [--tasks 1_Matmul,level2/3_Matmul_Scale_Softmax]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from davinci_kernel.report.fastp import fastp_table  # noqa: E402
from davinci_kernel.tasks import REFERENCE_DIR, load_suite  # noqa: E402

ATOL = RTOL = 1e-2
SEED = 1234


def _selected(tasks, level, names):
    out = []
    for t in tasks:
        if level is not None and t.level != level:
            continue
        stem = t.name.split("/", 1)[-1]
        if names and t.name not in names and stem not in names:
            continue
        out.append(t)
    return out


def _load_reference(task):
    path = REFERENCE_DIR / f"{task.name}.py"
    if not path.is_file():
        return None
    module_name = "reference_" + task.name.replace("/", "_")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # triton's jit looks the kernel's module up by name
    spec.loader.exec_module(module)
    return module


def _task_id(name: str) -> int:
    stem = name.split("/", 1)[-1]
    head = stem.split("_", 1)[0]
    return int(head) if head.isdigit() else 0


def _bench(fn, warmup, rep):
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def _max_diff(got, want):
    if type(got) is not torch.Tensor or got.shape != want.shape or got.dtype != want.dtype:
        return None, f"output {type(got).__name__} {tuple(getattr(got, 'shape', ()))} " \
                     f"{getattr(got, 'dtype', '')}, expected {tuple(want.shape)} {want.dtype}"
    g, w = got.float(), want.float()
    diff = (g - w).abs().max().item() if g.numel() else 0.0
    if not torch.isfinite(g).all():
        return diff, "non-finite output"
    if not torch.allclose(g, w, atol=ATOL, rtol=RTOL):
        return diff, f"mismatch: max abs diff {diff:.3g}"
    return diff, None


def run_task(task, device, warmup, rep, with_compile=True) -> dict:
    row = {"task": task.name, "level": task.level, "op_type": task.op_type, "correct": False,
           "max_abs_diff": None, "eager_ms": None, "compile_ms": None, "ours_ms": None,
           "speedup": None, "speedup_compile": None, "error": None}
    ref = _load_reference(task)
    if ref is None:
        row["error"] = "no reference solution"
        return row
    ns: dict = {"__name__": "problem_" + task.name.replace("/", "_")}
    exec(compile(task.source, task.path or task.name, "exec"), ns)
    with torch.device(device):
        torch.manual_seed(SEED)
        inputs = ns["get_inputs"]()
        init = ns["get_init_inputs"]()
        torch.manual_seed(SEED + 1)
        model = ns["Model"](*init).eval()
        torch.manual_seed(SEED + 1)
        model_new = ref.ModelNew(*init).eval()
    with torch.no_grad():
        want = model(*inputs)
        got = model_new(*inputs)
        torch.cuda.synchronize()
        row["max_abs_diff"], error = _max_diff(got, want)
        del got, want
        if error:
            row["error"] = error
            return row
        row["correct"] = True
        row["eager_ms"] = _bench(lambda: model(*inputs), warmup, rep)
        row["ours_ms"] = _bench(lambda: model_new(*inputs), warmup, rep)
        if with_compile:
            try:
                compiled = torch.compile(model)
                compiled(*inputs)
                torch.cuda.synchronize()
                row["compile_ms"] = _bench(lambda: compiled(*inputs), warmup, rep)
            except Exception as e:  # a compile failure costs the baseline, not the task
                row["compile_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    row["speedup"] = row["eager_ms"] / row["ours_ms"]
    if row["compile_ms"]:
        row["speedup_compile"] = row["compile_ms"] / row["ours_ms"]
    return row


def _reset_compile_caches():
    import torch._dynamo as dynamo

    dynamo.reset()


def _fmt(v, width, spec, suffix=""):
    text = "-" if v is None else format(v, spec) + suffix
    return text.rjust(width)


def print_table(rows, summary):
    print(f"{'task':44} {'eager ms':>9} {'compile ms':>10} {'ours ms':>9} {'vs eager':>8} {'vs compile':>10}")
    for r in rows:
        line = (f"{r['task']:44} {_fmt(r['eager_ms'], 9, '.3f')} {_fmt(r['compile_ms'], 10, '.3f')} "
                f"{_fmt(r['ours_ms'], 9, '.3f')} {_fmt(r['speedup'], 8, '.2f', 'x')} "
                f"{_fmt(r['speedup_compile'], 10, '.2f', 'x')}")
        if r["error"]:
            line += f"  FAILED: {r['error']}"
        print(line)
    print()
    for level, s in summary.items():
        print(f"level {level}: n={s['n']} correct={s['fast_0']:.0%} fast_1={s['fast_1']:.0%} "
              f"fast_1.5={s['fast_1.5']:.0%} geomean vs eager {_fmt(s['geomean'], 0, '.2f', 'x')}, "
              f"vs compile {_fmt(s['geomean_compile'], 0, '.2f', 'x')}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--level", type=int, default=None, help="only this level")
    ap.add_argument("--tasks", default="", help="comma-separated task names (1_Matmul or level1/1_Matmul)")
    ap.add_argument("--warmup", type=int, default=25, help="do_bench warm-up time in ms")
    ap.add_argument("--rep", type=int, default=100, help="do_bench measuring time in ms")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "reference_kernels.json"),
                    help="where to write the JSON")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("reference_kernels.py needs a CUDA GPU", file=sys.stderr)
        return 2
    names = {n.strip() for n in args.tasks.split(",") if n.strip()}
    tasks = _selected(load_suite("builtin"), args.level, names)
    if not tasks:
        print("no built-in task matches the selection", file=sys.stderr)
        return 2
    device = "cuda"
    rows = []
    for i, task in enumerate(tasks, 1):
        print(f"[{i}/{len(tasks)}] {task.name}", file=sys.stderr, flush=True)
        try:
            row = run_task(task, device, args.warmup, args.rep, with_compile=not args.no_compile)
        except Exception as e:
            row = {"task": task.name, "level": task.level, "op_type": task.op_type, "correct": False,
                   "max_abs_diff": None, "eager_ms": None, "compile_ms": None, "ours_ms": None,
                   "speedup": None, "speedup_compile": None,
                   "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}",
                   "traceback": traceback.format_exc()[-2000:]}
        rows.append(row)
        if row["error"]:
            print(f"    FAILED: {row['error']}", file=sys.stderr, flush=True)
        gc.collect()
        torch.cuda.empty_cache()
        _reset_compile_caches()
    print_table(rows, {str(k): v for k, v in fastp_table(rows).items()})
    carried = []
    if (args.level is not None or names) and Path(args.out).is_file():
        # A partial run (one level, some tasks) updates its rows in the existing file.
        try:
            previous = json.loads(Path(args.out).read_text()).get("results", [])
        except (OSError, ValueError):
            previous = []
        ran = {r["task"] for r in rows}
        carried = [r for r in previous if r.get("task") not in ran]
        rows = sorted(carried + rows, key=lambda r: (r.get("level", 0), _task_id(r["task"]), r["task"]))
    summary = {str(k): v for k, v in fastp_table(rows).items()}
    props = torch.cuda.get_device_properties(0)
    import triton

    doc = {
        "gpu": props.name,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "timing": {"tool": "triton.testing.do_bench", "return_mode": "median",
                   "warmup_ms": args.warmup, "rep_ms": args.rep,
                   "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                   "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32},
        "tolerance": {"atol": ATOL, "rtol": RTOL},
        "summary": summary,
        "carried_over": [r["task"] for r in carried],
        "results": rows,
    }
    targets = [Path(args.out)]
    if os.environ.get("OUT"):
        targets.append(Path(os.environ["OUT"]) / "reference_kernels.json")
    for path in targets:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
