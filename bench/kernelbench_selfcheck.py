"""The harness self-check on KernelBench (issue 17 items 4-6): every problem's own Model judged
as its candidate on one GPU, one level per call, and the committed summary of it.

Each call runs ``dvk bench --suite kernelbench:DIR --candidates self --device cuda --level N
--out OUT`` (OUT is resumed: problems already in OUT/results.jsonl are skipped, so a call cut
by the 10-minute device limit is simply repeated), records the call's wall time in
OUT/selfcheck_calls.jsonl, then rebuilds ``bench/results/kernelbench_selfcheck_h200.json``
from every line of OUT/results.jsonl, merged into the committed file (a problem OUT has not
judged keeps its committed entry; the committed calls stay counted), so a level run in an
earlier run folder is not lost with that folder:

    {"gpu", "torch", "date", "calls": [{"level", "seconds", "exit", "cut", "date", "gpu", "torch"}],
     "levels": {level: per-level table row},
     "problems": [{"task", "level", "finished", "why", "speedup", "eager_ms",
                   "peak_gpu_bytes", "seconds"}]}

``finished``/``why`` follow ``davinci_kernel.suite.selfcheck.verdict``; ``speedup`` is the
self-speedup, ``eager_ms`` the eager reference time, ``peak_gpu_bytes`` the memory plan's
measured peak (``timing_detail.plan``; its estimate where no measurement was recorded),
``seconds`` the evaluation's wall time. It prints the per-level table beside KernelBench's
own published H100 eager times (``DIR/../results/timing/H100_*/baseline_time_torch.json``,
where the checkout has them; the ratio is H100 ms / ours, per problem, geometric mean per
level: a sanity check of our timing, not a target) and writes a PNG of the self-speedups.

    python bench/kernelbench_selfcheck.py --kb .kb/KernelBench --level 1      # on the GPU machine
    python bench/kernelbench_selfcheck.py --kb .kb/KernelBench --level 1 --retry-failed  # the unfinished again
    python bench/kernelbench_selfcheck.py --kb .kb/KernelBench --no-run       # rebuild JSON/table/PNG

The KernelBench checkout stays outside the project (``.kb/`` is git-ignored).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from davinci_kernel.rundir import RESULTS_FILE, RUN_FILE  # noqa: E402
from davinci_kernel.suite import selfcheck  # noqa: E402
from davinci_kernel.suite.bench import read_results  # noqa: E402

RES = ROOT / "bench" / "results"
CALLS_FILE = "selfcheck_calls.jsonl"


# --------------------------------------------------------------------------- running
def run_level(kb: Path, level: int, out: Path, workers: Optional[int], budget_s: Optional[float] = None,
              retry_failed: bool = False, tasks: Optional[str] = None) -> dict:
    """One ``dvk bench`` call for one level; its wall time is recorded in OUT/CALLS_FILE.
    ``retry_failed``: the level's problems that did not finish are judged again.
    With ``budget_s`` the call is interrupted (SIGINT, as Ctrl-C: what finished is kept,
    the next call resumes) once that many seconds have passed, and ``cut`` says so."""
    cmd = [sys.executable, "-m", "davinci_kernel.cli", "bench", "--suite", f"kernelbench:{kb}",
           "--candidates", "self", "--device", "cuda", "--level", str(level), "--out", str(out)]
    if workers:
        cmd += ["--workers", str(workers)]
    if retry_failed:
        cmd.append("--retry-failed")
    if tasks:
        cmd += ["--tasks", tasks]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT)
    cut = False
    try:
        code = proc.wait(timeout=budget_s)
    except subprocess.TimeoutExpired:
        cut = True
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    call = {"level": level, "seconds": round(time.monotonic() - t0, 1), "exit": code, "cut": cut,
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "gpu": _gpu_name(), "torch": _torch_version()}  # the machine that ran it, for a rebuild elsewhere
    if out.is_dir():
        with open(out / CALLS_FILE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(call) + "\n")
    return call


# --------------------------------------------------------------------------- building
def peak_bytes(row: dict) -> Optional[int]:
    plan = (row.get("timing_detail") or {}).get("plan") or {}
    if not isinstance(plan, dict):
        return None
    for key in ("measured_peak_bytes", "peak_bytes"):
        if isinstance(plan.get(key), (int, float)):
            return int(plan[key])
    return None


def problem(row: dict) -> dict:
    ok, why = selfcheck.verdict(row)
    named = selfcheck.notes(row)
    return {"task": row.get("task"), "level": int(row.get("level") or 0), "finished": ok,
            "why": "; ".join(filter(None, [why, *named])) or None,
            "speedup": row.get("speedup"), "eager_ms": row.get("ref_runtime_ms"),
            "peak_gpu_bytes": peak_bytes(row), "seconds": round(float(row.get("eval_seconds") or 0.0), 2)}


NOT_RUN = "not run: no evaluation of it is recorded yet"


def not_run(kb: Path, judged: list[dict]) -> list[dict]:
    """An entry for each problem of a level that has results but not this problem's, so the
    file holds one entry per problem of every level it covers."""
    have = {p["task"] for p in judged}
    out = []
    for lvl in sorted({p["level"] for p in judged}):
        for f in sorted((kb / f"level{lvl}").glob("*.py")):
            task = f"level{lvl}/{f.stem}"
            if task not in have:
                out.append({"task": task, "level": lvl, "finished": False, "why": NOT_RUN, "speedup": None,
                            "eager_ms": None, "peak_gpu_bytes": None, "seconds": 0.0})
    return out


def published_times(kb: Path) -> dict[str, dict[str, float]]:
    """{"H100_Modal": {"level1/19_ReLU": ms}} from the checkout's results/timing, if any."""
    out: dict[str, dict[str, float]] = {}
    for f in sorted((kb.resolve().parent / "results" / "timing").glob("H100_*/baseline_time_torch.json")):
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        times = {}
        for level, probs in (doc.items() if isinstance(doc, dict) else []):
            for fname, stat in (probs.items() if isinstance(probs, dict) else []):
                if isinstance(stat, dict) and isinstance(stat.get("mean"), (int, float)) and stat["mean"] > 0:
                    times[f"{level}/{fname.removesuffix('.py')}"] = float(stat["mean"])
        if times:
            out[f.parent.name] = times
    return out


def _geomean(xs: list[float]) -> Optional[float]:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def level_rows(problems: list[dict], totals: dict, published: dict, calls: Optional[list[dict]] = None) -> dict[str, dict]:
    """Per level: how many problems ran and finished, the spread of self-speedups, the median
    eager time, the GPU time its calls took (``call_seconds``, wall time of the device calls)
    beside the sum of its evaluations' own seconds (which overlap, several workers at once),
    and the ratio to each set of published H100 times."""
    levels = sorted({p["level"] for p in problems} | {int(k) for k in totals})
    out = {}
    for lvl in levels:
        ps = [p for p in problems if p["level"] == lvl]
        fin = [p for p in ps if p["finished"]]
        sp = [p["speedup"] for p in fin if p["speedup"]]
        eager = [p["eager_ms"] for p in ps if p["eager_ms"]]
        row = {"problems": int(totals.get(str(lvl), len(ps))), "run": sum(p["why"] != NOT_RUN for p in ps),
               "finished": len(fin),
               **{k: v for k, v in selfcheck.spread(sp).items() if k != "n"}, "timed": len(sp),
               "median_eager_ms": statistics.median(eager) if eager else None,
               "call_seconds": round(sum(float(c.get("seconds") or 0) for c in calls or [] if c.get("level") == lvl), 1),
               "eval_seconds_sum": round(sum(p["seconds"] for p in ps), 1)}
        for name, times in published.items():
            pairs = [(times[p["task"]], p["eager_ms"]) for p in ps if p["eager_ms"] and p["task"] in times]
            row[name] = {"matched": len(pairs),
                         "median_ms": statistics.median(t for t, _ in pairs) if pairs else None,
                         "ratio": _geomean([t / ours for t, ours in pairs])}
        out[str(lvl)] = row
    return out


def build(run: Path, kb: Path, prev: Optional[dict] = None, gpu: Optional[str] = None) -> dict:
    rows = list(read_results(run / RESULTS_FILE).values())
    meta = {}
    if (run / RUN_FILE).is_file():
        meta = json.loads((run / RUN_FILE).read_text(encoding="utf-8"))
    if meta.get("candidates") != "self":
        raise ValueError(f"{run} is not a self-check run (run.json candidates {meta.get('candidates')!r})")
    prev = prev or {}
    ran_here = {r.get("task") for r in rows}
    # The committed record holds the problems and calls of earlier run folders: a problem this
    # folder has not judged keeps its recorded entry, a call recorded there stays counted.
    kept = [p for p in prev.get("problems") or [] if p.get("task") not in ran_here]
    judged = [*kept, *(problem(r) for r in rows)]
    problems = sorted([*judged, *not_run(kb, judged)], key=lambda p: (p["level"], _natural(p["task"])))
    calls = []
    if (run / CALLS_FILE).is_file():
        calls = [json.loads(x) for x in (run / CALLS_FILE).read_text().splitlines() if x.strip()]
    seen = {(c.get("date"), c.get("level")) for c in calls}
    calls = [*(c for c in prev.get("calls") or [] if (c.get("date"), c.get("level")) not in seen), *calls]
    ran = [c for c in calls if c.get("gpu")]  # the GPU machine's own record beats this machine's
    return {"gpu": gpu or (ran[-1]["gpu"] if ran else None) or _gpu_name() or prev.get("gpu"),
            "torch": (ran[-1].get("torch") if ran else None) or _torch_version() or prev.get("torch"),
            "date": datetime.date.today().isoformat(), "calls": calls,
            "levels": level_rows(problems, meta.get("totals") or {}, published_times(kb), calls),
            "problems": problems}


def _natural(text: str) -> tuple:
    import re

    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text) if t)


def _gpu_name() -> Optional[str]:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - no torch or no driver: leave it to the previous file
        return None


def _torch_version() -> Optional[str]:
    try:
        import torch

        return torch.__version__
    except Exception:  # noqa: BLE001
        return None


# --------------------------------------------------------------------------- showing
def _f(x, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def table(doc: dict) -> str:
    names = sorted({k for row in doc["levels"].values() for k in row if k.startswith("H100_")})
    head = ["level", "run/all", "finished", "within ±2%", "min", "median", "max", "eager ms (median)", "GPU s"]
    for n in names:
        head += [f"{n} ms", f"{n} / ours"]
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for lvl, r in doc["levels"].items():
        cells = [lvl, f"{r['run']}/{r['problems']}", str(r["finished"]), _f(r["within_2pct"], ".1%"),
                 _f(r["min"], ".3f"), _f(r["median"], ".3f"), _f(r["max"], ".3f"), _f(r["median_eager_ms"], ".3f"),
                 _f(r.get("call_seconds"), ".0f")]
        for n in names:
            h = r.get(n) or {}
            cells += [_f(h.get("median_ms"), ".3f"), _f(h.get("ratio"), ".2f") + (f" (n={h['matched']})" if h else "")]
        lines.append(" | ".join(cells))
    unfinished = [p for p in doc["problems"] if not p["finished"]]
    if unfinished:
        lines.append(f"did not finish ({len(unfinished)}):")
        lines += [f"  {p['task']}: {p['why']}" for p in unfinished]
    return "\n".join(lines)


def plot(doc: dict, path: Path) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.6), dpi=120)
    ax = fig.add_subplot()
    ax.axhspan(0.98, 1.02, color="#d9ead3", label="1.00 ± 2 %")
    x = 0
    for lvl in sorted({p["level"] for p in doc["problems"]}):
        ps = [p for p in doc["problems"] if p["level"] == lvl and p["finished"] and p["speedup"]]
        ax.scatter(range(x, x + len(ps)), [p["speedup"] for p in ps], s=10, label=f"level {lvl} ({len(ps)})")
        x += len(ps)
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xlabel("problem (finished, by level)")
    ax.set_ylabel("self-speedup (Model vs itself)")
    ax.set_title(f"Harness self-check on KernelBench — {doc.get('gpu') or 'GPU'}")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kb", type=Path, required=True, help="KernelBench problems folder (holds level1/ ...)")
    ap.add_argument("--level", type=int, help="run this level (one per call); without it, or with --no-run, only rebuild")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "kernelbench-selfcheck", help="dvk bench run directory (resumed)")
    ap.add_argument("--workers", type=int, help="dvk bench --workers")
    ap.add_argument("--budget-s", type=float, help="interrupt the level's call after this many seconds (it resumes "
                    "next time); keep it under the device call's own limit")
    ap.add_argument("--retry-failed", action="store_true", help="judge the level's unfinished problems again "
                    "(dvk bench --retry-failed: each new line replaces the old one)")
    ap.add_argument("--tasks", help="only these problems of the level (dvk bench --tasks: comma-separated "
                    "shell patterns, e.g. 'level2/77_*')")
    ap.add_argument("--no-run", action="store_true", help="only rebuild the JSON, table and plot from --out")
    ap.add_argument("--json-out", type=Path, default=RES / "kernelbench_selfcheck_h200.json")
    ap.add_argument("--plot", type=Path, default=RES / "kernelbench_selfcheck_h200.png")
    ap.add_argument("--gpu", help="GPU name to record (default: torch's name of cuda:0, else the previous file's)")
    a = ap.parse_args(argv)
    if not a.kb.is_dir():
        print(f"error: --kb {a.kb}: not a folder (the KernelBench problems, e.g. .kb/KernelBench)", file=sys.stderr)
        return 2
    if a.level is not None and not a.no_run:
        call = run_level(a.kb, a.level, a.out, a.workers, a.budget_s, a.retry_failed, a.tasks)
        print(f"level {a.level}: dvk bench exited {call['exit']} after {call['seconds']} s"
              + (" (cut at the budget: run it again to resume)" if call["cut"] else ""), file=sys.stderr)
        if call["exit"] == 2 and not call["cut"]:
            return 2
    if not (a.out / RESULTS_FILE).is_file():
        print(f"error: {a.out} has no results.jsonl: run a level first", file=sys.stderr)
        return 2
    prev = json.loads(a.json_out.read_text()) if a.json_out.is_file() else None
    try:
        doc = build(a.out, a.kb, prev, a.gpu)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    a.json_out.parent.mkdir(parents=True, exist_ok=True)
    a.json_out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(table(doc))
    print(f"wrote {a.json_out} and {plot(doc, a.plot)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
