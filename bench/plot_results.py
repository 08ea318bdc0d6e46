"""PNG figures for the README from the committed GPU results (no GPU needed).

Reads ``bench/results/reference_kernels_h200.json`` (per-task speedups of the reference
kernels, through the report's own figure code) and ``bench/results/harness_h200.json``
(speedup repeatability, ours vs a KernelBench-style timing), writes
``bench/results/reference_kernels_h200.png`` and ``bench/results/harness_repeatability_h200.png``.

    python bench/plot_results.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from matplotlib.figure import Figure  # noqa: E402

from davinci_kernel.report.plots import speedup_figure  # noqa: E402

RES = ROOT / "bench" / "results"


def reference_png() -> Path:
    rows = json.loads((RES / "reference_kernels_h200.json").read_text())["results"]
    out = RES / "reference_kernels_h200.png"
    out.write_bytes(speedup_figure(rows))
    return out


def repeatability_png() -> Path:
    d = json.loads((RES / "harness_h200.json").read_text())
    rows = d["repeatability"]
    names = [r["task"].split("/")[1] for r in rows]
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax = fig.subplots()
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [100 * (r["ours_p95_dev"] or 0) for r in rows], 0.4, label="ours (interleaved)")
    ax.bar([x + 0.2 for x in xs], [100 * r["kb_p95_dev"] for r in rows], 0.4, label="KernelBench-style")
    ax.axhline(1.0, color="k", lw=0.8, ls="--", label="1 % target")
    ax.set_xticks(list(xs), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("p95 |speedup / median − 1| (%)")
    ax.set_title(f"Speedup repeatability over {len(rows[0]['ours'])} evaluations, {d['gpu']}")
    ax.legend(fontsize=8)
    out = RES / "harness_repeatability_h200.png"
    fig.savefig(out, dpi=110)
    return out


if __name__ == "__main__":
    for p in (reference_png(), repeatability_png()):
        print("wrote", p)
