"""The report's figures, drawn with Matplotlib's Agg canvas and returned as PNG bytes.

Covers: the Fast_p bar chart per level, speedup distributions per level (sorted bars and
a histogram on log scales, against eager and torch.compile), the roofline (each task's
fraction of the card's peak) and training curves
(rewards, Fast_p, losses, throughput, skill-library size per step), and the comparison of
runs (Fast_p bars per run, per level and result group). Uses ``Figure`` +
``FigureCanvasAgg`` directly, never pyplot, so no global backend state is touched.
Does not cover computing metrics (fastp.py) or writing files (build.py).
"""

from __future__ import annotations

import io
import math
from typing import Optional

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

FASTER = "#1b9e77"  # correct and faster than the baseline
SLOWER = "#d95f02"  # correct but slower
COMPILE = "#7570b3"  # the torch.compile comparison
P_COLORS = ("#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#084594")
DPI = 100


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _log_axis(axis) -> None:
    """Ticks at 1-2-5 steps labelled like ``0.5×``, instead of powers of ten."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    axis.set_minor_formatter(NullFormatter())


def level_label(level) -> str:
    if level == "all":
        return "all"
    return f"level {level}" if level else "level ?"


def fastp_figure(tables: dict[str, dict], ps) -> bytes:
    """Grouped bars: one subplot per result group, levels on x, one bar per p."""
    names = list(tables)
    fig = Figure(figsize=(min(5.0 * len(names), 12.0), 3.8), layout="constrained")
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names):
        table = tables[name]
        levels = list(table)
        width = 0.8 / len(ps)
        for j, p in enumerate(ps):
            xs = [i + (j - (len(ps) - 1) / 2) * width for i in range(len(levels))]
            vals = [table[lvl][f"fast_{p:g}"] for lvl in levels]
            ys = [0.0 if v is None else 100.0 * v for v in vals]  # None: not timed (n/a), no bar
            ax.bar(xs, ys, width=width, color=P_COLORS[j % len(P_COLORS)],
                   label=f"Fast_{p:g}" + (" (n/a)" if all(v is None for v in vals) else ""))
        ax.set_xticks(range(len(levels)))
        ax.set_xticklabels([f"{level_label(lvl)}\n(n={table[lvl]['n']})" for lvl in levels])
        ax.set_ylim(0, 135)  # headroom above 100 % so the legend covers no bar
        ax.set_yticks(range(0, 101, 20))
        ax.set_ylabel("% of tasks")
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(f"Fast_p — {name}" if name else "Fast_p")
    axes[-1].legend(fontsize=7, loc="upper center", ncol=len(ps), handlelength=1.0, columnspacing=0.8)
    return _png(fig)


def _log_bins(values: list[float]) -> list[float]:
    lo = min(min(values), 1.0) * 0.9
    hi = max(max(values), 1.0) * 1.1
    n = 24
    a, b = math.log10(lo), math.log10(hi)
    return [10 ** (a + (b - a) * i / n) for i in range(n + 1)]


def _speedup_row(ax_bars, ax_hist, level, rows: list[dict]) -> None:
    timed = sorted((r for r in rows if r["correct"] and r["speedup"]), key=lambda r: r["speedup"])
    untimed = sum(1 for r in rows if r["correct"] and not r["speedup"])
    wrong = sum(1 for r in rows if not r["correct"])
    title = f"{level_label(level)}: {len(timed)} timed"
    if untimed:
        title += f", {untimed} correct untimed"
    if wrong:
        title += f", {wrong} incorrect"
    ax_bars.set_title(title, fontsize=10)
    if not timed:
        ax_bars.text(0.5, 0.5, "no timed correct results", ha="center", va="center",
                     transform=ax_bars.transAxes)
        ax_hist.set_axis_off()
        return
    xs = range(len(timed))
    s = [r["speedup"] for r in timed]
    ax_bars.bar(xs, [v - 1.0 for v in s], bottom=1.0, width=0.85,
                color=[FASTER if v > 1.0 else SLOWER for v in s])
    handles = [Patch(color=FASTER, label="faster than eager"), Patch(color=SLOWER, label="slower than eager")]
    comp = [(i, r["speedup_compile"]) for i, r in enumerate(timed) if r["speedup_compile"]]
    if comp:
        ax_bars.scatter([i for i, _ in comp], [v for _, v in comp], s=12, color=COMPILE, zorder=3)
        handles.append(Line2D([], [], marker="o", ls="", color=COMPILE, label="vs torch.compile"))
    ax_bars.legend(handles=handles, fontsize=7, loc="upper left")
    ax_bars.set_yscale("log")
    _log_axis(ax_bars.yaxis)
    ax_bars.axhline(1.0, color="black", lw=0.8)
    ax_bars.set_xlabel("tasks, sorted by speedup vs eager")
    ax_bars.set_ylabel("speedup (log)")
    ax_bars.grid(axis="y", alpha=0.3)
    ax_bars.set_xlim(-0.6, len(timed) - 0.4)
    ax_bars.xaxis.set_major_locator(MaxNLocator(integer=True))

    values = s + [v for _, v in comp]
    bins = _log_bins(values)
    series = [(s, FASTER, "vs eager")]
    if comp:
        series.append(([v for _, v in comp], COMPILE, "vs torch.compile"))
    ax_hist.hist([x[0] for x in series], bins=bins, color=[x[1] for x in series],
                 label=[x[2] for x in series])
    ax_hist.set_xscale("log")
    _log_axis(ax_hist.xaxis)
    ax_hist.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_hist.axvline(1.0, color="black", lw=0.8)
    ax_hist.set_xlabel("speedup (log)")
    ax_hist.set_ylabel("tasks")
    ax_hist.legend(fontsize=7)
    ax_hist.set_title("distribution", fontsize=10)


def speedup_figure(rows: list[dict]) -> Optional[bytes]:
    """One row of panels per level; None when no result carries a speedup."""
    if not any(r["correct"] and r["speedup"] for r in rows):
        return None
    levels = sorted({r["level"] for r in rows})
    fig = Figure(figsize=(11.0, 3.3 * len(levels)), layout="constrained")
    axes = fig.subplots(len(levels), 2, squeeze=False, width_ratios=[1.6, 1.0])
    for (ax_bars, ax_hist), level in zip(axes, levels):
        _speedup_row(ax_bars, ax_hist, level, [r for r in rows if r["level"] == level])
    return _png(fig)


MEMORY_BOUND, COMPUTE_BOUND = "#2171b5", "#d95f02"


def _bound(row: dict) -> str:
    light = (row.get("timing_detail") or {}).get("light") if isinstance(row.get("timing_detail"), dict) else None
    return str(light.get("bound")) if isinstance(light, dict) and light.get("bound") else "memory"


def roofline_figure(rows: list[dict]) -> Optional[bytes]:
    """Each timed task's fraction of the card's peak (speed-of-light floor / its time),
    sorted, coloured by what bounds its floor (memory or compute), with the peak at 1; None
    when no result has a peak fraction."""
    pts = sorted(((r["peak_fraction"], r["task"], _bound(r)) for r in rows if r.get("peak_fraction")),
                 key=lambda x: x[0])
    if not pts:
        return None
    fig = Figure(figsize=(11.0, max(3.0, 0.22 * len(pts) + 1.2)), layout="constrained")
    ax = fig.subplots()
    ys = range(len(pts))
    ax.barh(list(ys), [p for p, _, _ in pts], color=[COMPUTE_BOUND if b == "compute" else MEMORY_BOUND
                                                      for _, _, b in pts])
    ax.set_yticks(list(ys), [t for _, t, _ in pts], fontsize=7)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", lw=1)
    ax.set_xlabel("fraction of peak (speed-of-light floor / timed time; 1 = the card's measured peak)")
    ax.set_title("roofline: fraction of peak per task", fontsize=10)
    ax.legend(handles=[Patch(color=MEMORY_BOUND, label="memory-bound floor"),
                       Patch(color=COMPUTE_BOUND, label="compute-bound floor")], fontsize=7, loc="lower right")
    return _png(fig)


def skill_growth(metrics: list[dict], skills: list[dict]) -> list[tuple[float, float]]:
    """(step, library size) points: from ``skills/size`` metrics, else from skills' ``step``."""
    pts = [(m["step"], m["skills/size"]) for m in metrics if "skills/size" in m]
    if pts:
        return pts
    steps = sorted(s["step"] for s in skills if isinstance(s.get("step"), (int, float))
                   and not isinstance(s.get("step"), bool))
    return [(step, i + 1) for i, step in enumerate(steps)]


def _panels(metrics: list[dict]) -> list[tuple[str, list[str]]]:
    keys = sorted({k for m in metrics for k in m if k != "step"})
    groups = [
        ("reward", [k for k in keys if k.startswith("reward")]),
        ("Fast_p", [k for k in keys if k.startswith("fast_")]),
        ("loss", [k for k in keys if k.startswith("loss")]),
        ("throughput", [k for k in keys if "tokens_per_s" in k or k.endswith("/s")]),
    ]
    return [(title, ks) for title, ks in groups if ks]


def training_figure(metrics: list[dict], skills: list[dict]) -> Optional[bytes]:
    """Curves per step; None when there is nothing to draw."""
    panels = _panels(metrics)
    growth = skill_growth(metrics, skills)
    count = len(panels) + (1 if growth else 0)
    if count == 0:
        return None
    ncols = 2 if count > 1 else 1
    nrows = math.ceil(count / ncols)
    fig = Figure(figsize=(11.0, 3.2 * nrows), layout="constrained")
    axes = list(fig.subplots(nrows, ncols, squeeze=False).flat)
    for ax, (title, keys) in zip(axes, panels):
        for key in keys:
            pts = [(m["step"], m[key]) for m in metrics if key in m]
            scale = 100.0 if title == "Fast_p" else 1.0
            ax.plot([p[0] for p in pts], [p[1] * scale for p in pts],
                    marker="o" if len(pts) <= 30 else None, ms=3, lw=1.2, label=key)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        if title == "Fast_p":
            ax.set_ylabel("% of tasks")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2 if len(keys) > 6 else 1)
    if growth:
        ax = axes[len(panels)]
        ax.step([p[0] for p in growth], [p[1] for p in growth], where="post", color=FASTER)
        ax.set_title("skill library size", fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel("skills")
        ax.grid(alpha=0.3)
    for ax in axes[count:]:
        ax.set_axis_off()
    return _png(fig)


RUN_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")


def compare_figure(tables: dict[str, list[dict]], labels: list[str], ps) -> bytes:
    """Runs side by side: one row of panels per result group, one panel per level (and all),
    Fast_p on x, one bar per run (``labels``: one legend entry per run)."""
    groups = list(tables)
    levels = list(tables[groups[0]][0])
    fig = Figure(figsize=(min(3.2 * len(levels), 14.0), 3.0 * len(groups)), layout="constrained")
    axes = fig.subplots(len(groups), len(levels), squeeze=False)
    width = 0.8 / len(labels)
    for gi, group in enumerate(groups):
        for li, lvl in enumerate(levels):
            ax = axes[gi][li]
            for ri, (label, table) in enumerate(zip(labels, tables[group])):
                row = table.get(lvl, {})
                xs = [j + (ri - (len(labels) - 1) / 2) * width for j in range(len(ps))]
                ys = [0.0 if row.get(f"fast_{p:g}") is None else 100.0 * row[f"fast_{p:g}"] for p in ps]
                ax.bar(xs, ys, width=width, color=RUN_COLORS[ri % len(RUN_COLORS)], label=label)
            ax.set_xticks(range(len(ps)))
            ax.set_xticklabels(["correct" if p == 0 else f"F_{p:g}" for p in ps], fontsize=8)
            ax.set_ylim(0, 105)
            ax.set_yticks(range(0, 101, 25))
            ax.grid(axis="y", alpha=0.3)
            ax.set_title(f"{group} turn — {level_label(lvl)}", fontsize=9)
            if li == 0:
                ax.set_ylabel("% of tasks")
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside upper center", ncol=min(len(labels), 4), fontsize=8)
    return _png(fig)
