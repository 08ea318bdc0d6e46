"""PNG figures for the docs (docs/results.md) from the committed GPU results (no GPU needed).

Reads ``bench/results/reference_kernels_h200.json`` (per-task speedups of the reference
kernels, through the report's own figure code) and ``bench/results/harness_h200.json``
(speedup repeatability of the widest-spread tasks under each timing setting) and
``bench/results/sft_then_rl_h200.json`` (SFT loss by epoch, then the RL step), writes
``bench/results/reference_kernels_h200.png``, ``bench/results/harness_repeatability_h200.png``
and ``bench/results/sft_then_rl_h200.png``.

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


SERIES = [  # (label, key in harness_h200.json, variant name): timing settings, oldest first
    ("fill_ flush, no lead (before)", "variants_lead_first_tried", "default"),
    ("whole-GPU flush, no lead", "variants_flush_and_lead", "no_lead"),
    ("fill_ flush + auto lead", "variants_lead_first_tried", "lead_auto"),
    ("whole-GPU flush + auto lead (default)", "variants", "default"),
    ("default, 0.3 s budget", "variants", "budget_300ms"),
]


def repeatability_png() -> Path:
    """p95 |speedup / median - 1| per task under each timing setting (log scale)."""
    d = json.loads((RES / "harness_h200.json").read_text())
    tasks = sorted({r["task"] for r in d["variants"]})
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / len(SERIES)
    for k, (label, key, name) in enumerate(SERIES):
        got = {r["task"]: r["p95_dev"] for r in d.get(key, []) if r["variant"] == name and r["p95_dev"] is not None}
        xs = [i + (k - (len(SERIES) - 1) / 2) * width for i, t in enumerate(tasks) if t in got]
        ax.bar(xs, [100 * max(got[t], 1e-4) for t in tasks if t in got], width, label=label)
    ax.axhline(1.0, color="k", lw=0.8, ls="--", label="1 % target")
    ax.set_yscale("log")
    ax.set_xticks(range(len(tasks)), [t.split("/")[1] for t in tasks], fontsize=8)
    ax.set_ylabel("p95 |speedup / median − 1| (%)")
    ax.set_title(f"Speedup repeatability over repeated evaluations, {d['gpu']}, by timing setting")
    ax.legend(fontsize=7, ncol=2)
    out = RES / "harness_repeatability_h200.png"
    fig.savefig(out, dpi=110)
    return out


def sft_then_rl_png() -> Path:
    """SFT loss per epoch (log scale), and the RL steps' correct fraction and update tokens."""
    d = json.loads((RES / "sft_then_rl_h200.json").read_text())
    fig = Figure(figsize=(9, 3.6))
    ax, bx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2, 1]})
    ep = sorted(d["sft"]["loss_by_epoch"].items(), key=lambda kv: int(kv[0]))
    ax.plot([int(k) for k, _ in ep], [v for _, v in ep], marker="o")
    ax.set_yscale("log")
    ax.set_xlabel("SFT epoch")
    ax.set_ylabel("loss (assistant tokens)")
    ax.set_title(f"SFT on {d['sft']['examples']} reference-kernel conversations", fontsize=10)
    ax.grid(alpha=0.3)
    steps = d["rl"]["steps"]
    xs = range(1, len(steps) + 1)
    bx.bar([x - 0.2 for x in xs], [s["correct/policy"] for s in steps], width=0.4, label="correct fraction")
    bx.set_ylim(0, 1)
    bx.set_xlabel("RL step")
    bx.set_xticks(list(xs))
    bx.set_ylabel("correct fraction of policy turns")
    tw = bx.twinx()
    tw.bar([x + 0.2 for x in xs], [s["update_tokens"] / 1000 for s in steps], width=0.4, color="tab:orange",
           label="update tokens (k)")
    tw.set_ylabel("tokens in the update (k)")
    bx.set_title("RL from the SFT model", fontsize=10)
    fig.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    out = RES / "sft_then_rl_h200.png"
    fig.savefig(out, dpi=120)
    return out


if __name__ == "__main__":
    for p in (reference_png(), repeatability_png(), sft_then_rl_png()):
        print("wrote", p)
