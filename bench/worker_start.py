"""How long a sandboxed candidate worker takes from "start one" to "ready": exec'd through
``unshare`` (a fresh interpreter imports torch and Triton) vs forked from the pre-imported
zygote (``eval.prefork``), side by side in one run, on the CPU or a GPU.

Usage: python bench/worker_start.py [--device cpu|cuda] [--n 6] [--out FILE]
Prints a table (median and max seconds to ready, per way of starting; the zygote's own
start once) and writes JSON (default bench/results/worker_start_<device>.json, also
$OUT/worker_start.json when OUT is set).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def measure(device: str, n: int, fork: bool) -> dict:
    from davinci_kernel.evaluate.harness.isolation import forkserver, sandbox
    from davinci_kernel.evaluate.harness.isolation.procs import Limits, WorkerProcess, device_env

    root = tempfile.mkdtemp(prefix="dvk-start-")
    os.chmod(root, 0o711)
    fs = forkserver.ForkServer(device_env(device), root) if fork else None
    times, zygote_s, how = [], None, set()
    try:
        if fs is not None:
            t0 = time.monotonic()
            with fs._lock:
                fs._start()
            zygote_s = time.monotonic() - t0
        for _ in range(n):
            t0 = time.monotonic()
            w = WorkerProcess("candidate", device, root, limits=Limits(memory_bytes=8 << 30), forkserver=fs)
            try:
                w.wait_ready(timeout=300)
                times.append(time.monotonic() - t0)
                how.add(w.started_by)
            finally:
                w.kill()
    finally:
        if fs is not None:
            fs.close()
        sandbox.remove_tree(root)
    return {"started_by": sorted(how), "n": len(times), "median_s": statistics.median(times),
            "max_s": max(times), "seconds": [round(t, 4) for t in times], "zygote_start_s": zygote_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda (cuda:0)")
    ap.add_argument("--n", type=int, default=6, help="workers started one after another, per way")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from davinci_kernel.evaluate.harness.isolation import forkserver, sandbox

    device = "cuda:0" if args.device == "cuda" else args.device
    caps = sandbox.probe()
    if not forkserver.usable(caps):
        sys.exit(f"the zygote needs root and every namespace; this machine has: {caps.describe()}")
    rows = {"exec": measure(device, args.n, False), "fork": measure(device, args.n, True)}
    gpu = "cpu"
    if device != "cpu":
        import torch

        gpu = torch.cuda.get_device_name(0)
    import torch

    doc = {"gpu": gpu, "torch": torch.__version__, "date": datetime.date.today().isoformat(),
           "host": platform.node(), "cpus": os.cpu_count(), "sandbox": caps.describe(), "device": device,
           "command": " ".join(["python", "bench/worker_start.py", *sys.argv[1:]]), "start": rows,
           "speedup_median": rows["exec"]["median_s"] / rows["fork"]["median_s"]}
    print(f"{'start':6} {'n':>3} {'median s':>9} {'max s':>7}")
    for k, r in rows.items():
        print(f"{k:6} {r['n']:>3} {r['median_s']:>9.3f} {r['max_s']:>7.3f}")
    print(f"zygote start (once per pool): {rows['fork']['zygote_start_s']:.2f} s; "
          f"fork is {doc['speedup_median']:.1f}x faster to ready")
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"worker_start_{'cpu' if device == 'cpu' else 'h200'}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "worker_start.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
