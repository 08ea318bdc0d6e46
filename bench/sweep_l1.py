"""Launch-parameter sweep for the level-1 reference kernels that sit near eager speed (GPU).

For softmax and mean reduction: check each configuration against eager PyTorch, time it with
``triton.testing.do_bench`` (median), print a table sorted by time and the eager time beside it,
and write ``$OUT/sweep_l1.json`` (or ``bench/results/sweep_l1.json``). The winners become the
launchers' defaults in ``davinci_kernel/tasks/reference/level1/``. Not a test.

    python bench/sweep_l1.py
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import itertools
import json
import os
import sys
from pathlib import Path

import torch
import triton.testing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from davinci_kernel.evaluate.shared.runtime import exec_source as _exec_source  # noqa: E402
from davinci_kernel.tasks import REFERENCE_DIR, load_suite  # noqa: E402


def load(name):
    task = next(t for t in load_suite("builtin") if t.name == name)
    prob = _exec_source(task.source, f"sweep_p_{name.split('/')[1]}")
    spec = importlib.util.spec_from_file_location(f"sweep_r_{name.split('/')[1]}", REFERENCE_DIR / f"{name}.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    torch.manual_seed(0)
    with torch.device("cuda"):
        x = prob.get_inputs()
    return prob.Model().cuda(), ref, x


def sweep(name, fn_name, grid):
    model, ref, x = load(name)
    fn = getattr(ref, fn_name)
    with torch.no_grad():
        want = model(*x)
        eager = triton.testing.do_bench(lambda: model(*x), return_mode="median")
    rows = []
    for kw in grid:
        try:
            got = fn(*x, **kw)
            ok = torch.allclose(got, want, atol=1e-4, rtol=1e-4)
            ms = triton.testing.do_bench(lambda kw=kw: fn(*x, **kw), return_mode="median")
            rows.append({"config": kw, "ok": bool(ok), "ms": ms, "speedup": eager / ms})
        except Exception as e:  # noqa: BLE001 - a config that does not compile is skipped
            rows.append({"config": kw, "ok": False, "error": f"{type(e).__name__}: {str(e)[:120]}"})
    rows.sort(key=lambda r: r.get("ms", float("inf")))
    print(f"\n{name}: eager {eager:.4f} ms")
    for r in rows[:8]:
        print(f"  {r.get('ms', float('nan')):.4f} ms  {r.get('speedup', 0):5.2f}x  ok={r['ok']}  {r['config']}")
    return {"task": name, "eager_ms": eager, "rows": rows}


def main():
    soft = [dict(num_warps=w, stages=s, programs_per_sm=p)
            for w, s, p in itertools.product([8, 16, 32], [1, 2, 3], [1, 2, 4, 8])]
    mean = [dict(block_r=r, block_d=d, stages=s, num_warps=w)
            for r, d, s, w in itertools.product([8, 16, 32, 64], [64, 128, 256, 512], [1, 2, 3, 4], [4, 8])
            if r * d <= 16384]
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "date": dt.date.today().isoformat(),
           "sweeps": [sweep("level1/3_Softmax", "softmax", soft), sweep("level1/8_MeanReduction", "mean_dim1", mean)]}
    dest = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "bench" / "results"
    (dest / "sweep_l1.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
