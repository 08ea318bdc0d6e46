"""How fast GPU outputs cross from a worker to the harness, step by step.

Times, on one GPU, each step an output takes in an evaluation (evaluate/transfer.py):
the worker writing a device tensor to a file under /dev/shm (copying straight into the
file's mapped pages, the way the worker does it, next to going through a host tensor
and write()), the harness reading it back whole, and the harness gathering a stratified sample
from a mapped reference (first touch and again), next to random-order indices. Prints a
table; writes the rows as JSON.

    python bench/transfer.py --out bench/results/transfer_h200.json
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


def host_write(torch, t, path: str) -> None:
    """The alternative: a host copy of the tensor, then write() into the file."""
    with open(path, "wb") as fh:
        t.to("cpu", copy=True).contiguous().reshape(-1).numpy().tofile(fh)


def timed(fn, reps: int) -> float:
    xs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t0)
    return statistics.median(xs)


def measure(torch, dev: str, root: str, mb: int, reps: int) -> dict:
    """Write, read and sample one ``mb``-megabyte leaf; seconds per step."""
    from davinci_kernel.evaluate.shared.transfer import SAMPLE_N, read_leaf, sample_indices, write_leaf

    n = mb * (1 << 20) // 4
    x = torch.randn(n, device=dev)
    path = os.path.join(root, "leaf.bin")

    def fresh(write):
        def go():
            if os.path.exists(path):
                os.remove(path)
            write()
            if dev == "cuda":
                torch.cuda.synchronize()
        return go

    host_s = timed(fresh(lambda: host_write(torch, x, path)), reps)
    mapped_s = timed(fresh(lambda: write_leaf(torch, x, path)), reps)
    write_leaf(torch, x, path)
    meta = {"kind": "tensor", "dtype": "float32", "shape": [n], "path": path}
    read_s = timed(lambda: read_leaf(meta), reps)
    t0 = time.perf_counter()
    ref = read_leaf(meta, mapped=True)
    idx = sample_indices(torch, n, 1)
    ref[idx].sum()
    first_s = time.perf_counter() - t0
    again_s = timed(lambda: ref[sample_indices(torch, n, 2)].sum(), reps)
    rand = torch.randint(0, n, (min(n, SAMPLE_N),), generator=torch.Generator().manual_seed(3))
    random_s = timed(lambda: ref[rand].sum(), reps)
    os.remove(path)
    return {"mb": mb, "write_host_s": host_s, "write_mapped_s": mapped_s, "read_whole_s": read_s,
            "sample_first_touch_s": first_s, "sample_again_s": again_s, "sample_random_order_s": random_s}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mb", default="4,64,512", help="output sizes in MB (float32)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "transfer.json"))
    args = ap.parse_args()
    try:
        sizes = [int(x) for x in args.sizes_mb.split(",") if x]
    except ValueError:
        print(f"transfer.py: --sizes-mb takes integers, got {args.sizes_mb!r}", file=sys.stderr)
        sys.exit(2)
    import torch

    from davinci_kernel.evaluate.shared.transfer import shm_root

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    root = tempfile.mkdtemp(prefix="dvk-transfer-", dir=shm_root())
    rows = []
    for mb in sizes:
        row = measure(torch, dev, root, mb, args.reps)
        host_s, mapped_s, read_s = row["write_host_s"], row["write_mapped_s"], row["read_whole_s"]
        first_s, again_s, random_s = row["sample_first_touch_s"], row["sample_again_s"], row["sample_random_order_s"]
        rows.append(row)
        print(f"{mb:5d} MB  write host {host_s * 1e3:8.1f} ms  write mapped {mapped_s * 1e3:8.1f} ms  "
              f"read {read_s * 1e3:7.1f} ms  sample first {first_s * 1e3:7.1f} ms  again {again_s * 1e3:6.1f} ms  "
              f"random order {random_s * 1e3:6.1f} ms", flush=True)
    os.rmdir(root)
    out = {"gpu": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu", "torch": torch.__version__,
           "date": datetime.date.today().isoformat(), "os_kernel": platform.release(), "device": dev,
           "command": " ".join(["python", *sys.argv]), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
