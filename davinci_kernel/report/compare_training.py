"""Comparing training runs: reward and Fast_p curves side by side, with their config difference.

Covers: telling training runs apart (``metrics.jsonl`` lines, no evaluation results), the
curves each run has per metric (``reward/*`` and ``fast_*`` keys, by step), the config fields
whose values differ between the runs (from each run's ``config.json``, dotted names), the
figure (one panel per metric, one line per run), the page (OUT/compare.html: runs, config
difference, figure) and the terminal/JSON view (the last value of each curve per run). Does
not cover comparing evaluation runs (``compare``) or reading a run (``rundata``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any, Optional

from ..errors import UsageError
from ..files import write_atomic
from .compare import LABELS
from .rundata import RunData

CURVE_PREFIXES = ("reward", "fast_")
CONFIG_FILE = "config.json"


@dataclass
class TrainingComparison:
    runs: list[RunData]
    labels: list[str]
    curves: dict[str, list[list[tuple[float, float]]]] = field(default_factory=dict)  # key → per run (step, value)
    config_diff: list[tuple[str, list[Any]]] = field(default_factory=list)  # (dotted field, value per run)

    def last(self, key: str, i: int) -> Optional[float]:
        pts = self.curves[key][i]
        return pts[-1][1] if pts else None


def is_training(run: RunData) -> bool:
    return bool(run.metrics) and not run.has_results


def _flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(obj, dict):
        return {prefix: obj}
    out: dict[str, Any] = {}
    for k, v in obj.items():
        out.update(_flat(v, f"{prefix}{k}." if isinstance(v, dict) else f"{prefix}{k}") if isinstance(v, dict)
                   else {f"{prefix}{k}": v})
    return out


def _config(run: RunData) -> dict[str, Any]:
    p = run.path / CONFIG_FILE
    try:
        doc = json.loads(p.read_text(encoding="utf-8")) if p.is_file() else {}
    except (ValueError, OSError):
        doc = {}
    return _flat(doc) if isinstance(doc, dict) else {}


def compare_training(runs: list[RunData]) -> TrainingComparison:
    """Curves per metric and the differing config fields of training runs (each must have metrics)."""
    for r in runs:
        if not is_training(r):
            raise UsageError(f"{r.path} is not a training run (no metrics.jsonl lines, or evaluation results): "
                             "compare training runs with training runs, evaluation runs with evaluation runs")
    comp = TrainingComparison(runs=runs, labels=list(LABELS[: len(runs)]))
    keys = sorted({k for r in runs for m in r.metrics for k in m if k.startswith(CURVE_PREFIXES)})
    for key in keys:
        comp.curves[key] = [[(m["step"], float(m[key])) for m in r.metrics
                             if isinstance(m.get(key), (int, float)) and not isinstance(m.get(key), bool)]
                            for r in runs]
    configs = [_config(r) for r in runs]
    names = sorted(set().union(*configs))
    comp.config_diff = [(n, [c.get(n) for c in configs]) for n in names
                        if len({json.dumps(c.get(n), sort_keys=True) for c in configs}) > 1]
    return comp


def training_compare_figure(comp: TrainingComparison) -> Optional[bytes]:
    """One panel per curve key, one line per run; None when no run has a curve."""
    import math

    from matplotlib.figure import Figure

    from .plots import RUN_COLORS, _png

    keys = [k for k, per in comp.curves.items() if any(per)]
    if not keys:
        return None
    ncols = 2 if len(keys) > 1 else 1
    fig = Figure(figsize=(11.0, 3.0 * math.ceil(len(keys) / ncols)), layout="constrained")
    axes = list(fig.subplots(math.ceil(len(keys) / ncols), ncols, squeeze=False).flat)
    for ax, key in zip(axes, keys):
        for i, (label, pts) in enumerate(zip(comp.labels, comp.curves[key])):
            scale = 100.0 if key.startswith("fast_") else 1.0
            ax.plot([p[0] for p in pts], [p[1] * scale for p in pts], color=RUN_COLORS[i % len(RUN_COLORS)],
                    marker="o" if len(pts) <= 30 else None, ms=3, lw=1.2, label=f"{label}: {comp.runs[i].path.name}")
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel("% of kernels" if key.startswith("fast_") else "")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[len(keys):]:
        ax.set_axis_off()
    return _png(fig)


def render_page(comp: TrainingComparison, png: Optional[bytes]) -> str:
    import base64

    runs = "".join(f"<li><b>{escape(lab)}</b> = {escape(str(r.path))}</li>" for lab, r in zip(comp.labels, comp.runs))
    head = "".join(f"<th>{escape(lab)}</th>" for lab in comp.labels)
    rows = "".join(f"<tr><td>{escape(n)}</td>" + "".join(f"<td data-run='{lab}'>{escape(json.dumps(v))}</td>"
                                                            for lab, v in zip(comp.labels, vals)) + "</tr>"
                   for n, vals in comp.config_diff)
    diff = (f"<table><tr><th>config field</th>{head}</tr>{rows}</table>" if rows
            else "<p>the runs' configs are the same</p>")
    fig = (f"<img alt='training curves' src='data:image/png;base64,{base64.b64encode(png).decode()}'>"
           if png else "<p>no reward or Fast_p curves</p>")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>dvk: training runs compared</title></head>"
            f"<body><h1>Training runs compared</h1><ul>{runs}</ul><h2>Config difference</h2>{diff}"
            f"<h2>Reward and Fast_p per step</h2>{fig}</body></html>\n")


def write_training_comparison(comp: TrainingComparison, out_dir: Path) -> tuple[Path, Optional[Path]]:
    """OUT/compare.html and OUT/compare.png (when there is a curve); returns their paths."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create {out_dir}: {e.strerror or e}") from None
    png = training_compare_figure(comp)
    fig_path = out_dir / "compare.png" if png else None
    if png:
        write_atomic(fig_path, png)
    html = out_dir / "compare.html"
    write_atomic(html, render_page(comp, png))
    return html, fig_path


def to_json(comp: TrainingComparison, html: Path, fig: Optional[Path]) -> dict:
    return {"report": str(html), "figures": {"compare": str(fig) if fig else None}, "kind": "training",
            "runs": [{"label": lab, "path": str(r.path), "steps": len(r.metrics)}
                     for lab, r in zip(comp.labels, comp.runs)],
            "last": {k: {lab: comp.last(k, i) for i, lab in enumerate(comp.labels)} for k in comp.curves},
            "config_diff": {n: dict(zip(comp.labels, vals)) for n, vals in comp.config_diff}}


def lines(comp: TrainingComparison) -> list[str]:
    """The terminal view: the runs, the last value of each curve per run, the config difference."""
    out = [f"{lab} = {r.path} ({len(r.metrics)} steps)" for lab, r in zip(comp.labels, comp.runs)]
    out.append("last value per run: " + ", ".join(comp.labels))
    for key in comp.curves:
        vals = [comp.last(key, i) for i in range(len(comp.runs))]
        out.append(f"  {key}: " + "  ".join("-" if v is None else f"{v:.3f}" for v in vals))
    if comp.config_diff:
        out.append("config difference:")
        out += [f"  {n}: " + "  ".join(json.dumps(v) for v in vals) for n, vals in comp.config_diff]
    else:
        out.append("config difference: none")
    return out
