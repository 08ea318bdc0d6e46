"""The HTML of a run report: one self-contained page (inline CSS, images as data URIs).

Covers: the header with run metadata, notes about skipped input, Fast_p tables per
result group, figures, per-task tables with links to kernel files, final training
metrics and the skill library. Every piece of text from the run is escaped; table cells
carry ``data-key`` / ``data-value`` with the exact numbers so tools can read them back.
Does not cover computing metrics, drawing figures or writing files.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import os
from html import escape
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote

from ..provenance import items as provenance_items
from .fastp import NA_NOTE, timing_unavailable
from .plots import level_label
from .rundata import RunData, candidate_path

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1200px;
 color:#222;background:#fff;padding:0 16px}
h1{font-size:24px;margin:0 0 6px}h2{font-size:19px;margin-top:30px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin-top:20px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:right;vertical-align:top}
th{background:#f3f4f6}td.t,th.t{text-align:left}
tr:nth-child(even) td{background:#fafbfc}
.ok{color:#2e7d32;font-weight:600}.bad{color:#c62828;font-weight:600}
.muted{color:#777}.note{background:#fff8e1;border:1px solid #f0d98c;padding:6px 10px;margin:4px 0;font-size:13px}
.flag{display:inline-block;background:#fde2e1;color:#8a1c1c;border-radius:3px;padding:0 4px;margin:1px;font-size:12px}
img{max-width:100%;border:1px solid #eee;margin:8px 0}
dl.meta{display:grid;grid-template-columns:max-content auto;gap:2px 14px;font-size:13px}
dl.meta dt{font-weight:600}dl.meta dd{margin:0;word-break:break-all}
.scroll{max-height:900px;overflow:auto}
"""

MAX_SKILL_ROWS = 500
CI_NOTE = ("[low–high]: 95 % bootstrap interval over tasks (each task's speedup redrawn within its own "
           "interval); docs/guides/evaluate.md says how to read it")


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def fmt_pct(x: Optional[float]) -> str:
    return "—" if x is None else f"{100.0 * x:.1f}%"


def fmt_fastp(x: Optional[float]) -> str:
    """A Fast_p share; None means unknown (no correct result was timed): ``n/a``."""
    return "n/a" if x is None else f"{100.0 * x:.1f}%"


def fmt_x(x: Optional[float]) -> str:
    return "—" if x is None else f"{x:.3f}×"


def fmt_ci(ci, percent: bool = False) -> str:
    """A 95 % interval as ``[low–high]`` (shares in percent, ratios in ×); empty without one."""
    if not ci:
        return ""
    if percent:
        return f"[{100.0 * ci[0]:.0f}–{100.0 * ci[1]:.0f}%]"
    return f"[{ci[0]:.2f}–{ci[1]:.2f}×]"


def with_ci(text: str, ci, percent: bool = False, sep: str = " ") -> str:
    """``text`` followed by its interval (``fmt_ci``) when there is one."""
    c = fmt_ci(ci, percent)
    return f"{text}{sep}{c}" if c else text


def fmt_num(x: Optional[float], digits: int = 4) -> str:
    return "—" if x is None else f"{x:.{digits}g}"


def _cell(key: str, value: Optional[float], text: str) -> str:
    dv = "" if value is None else repr(float(value))
    return f'<td data-key="{_e(key)}" data-value="{_e(dv)}">{_e(text)}</td>'


def img(png: Optional[bytes], alt: str) -> str:
    if not png:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _group_title(name: str) -> str:
    return f" — {name} results" if name else ""


def fastp_html(name: str, table: dict, ps) -> str:
    head = ["level", "n"] + [f"Fast_{p:g}" for p in ps] + ["geomean vs eager", "geomean vs compile"]
    out = [f'<table class="fastp" data-group="{_e(name)}"><thead><tr>']
    out += [f'<th class="t">{_e(h)}</th>' if i == 0 else f"<th>{_e(h)}</th>" for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for lvl, row in table.items():
        out.append(f'<tr data-level="{_e(lvl)}"><td class="t">{_e(level_label(lvl))}</td>')
        out.append(_cell("n", row["n"], str(row["n"])))
        for p in ps:
            key = f"fast_{p:g}"
            out.append(_cell(key, row[key], fmt_fastp(row[key])))
        out.append(_cell("geomean", row["geomean"], fmt_x(row["geomean"])))
        out.append(_cell("geomean_compile", row["geomean_compile"], fmt_x(row["geomean_compile"])))
        out.append("</tr>")
    out.append("</tbody></table>")
    out.append(ci_html(name, table, ps))
    if timing_unavailable(table):
        out.append(f'<div class="note">{_e(NA_NOTE)}</div>')
    return "".join(out)


def ci_html(name: str, table: dict, ps, label: str = "") -> str:
    """The 95 % intervals of a Fast_p table's figures (its rows' ``ci``), one row per level."""
    if not any(row.get("ci") for row in table.values()):
        return ""
    head = ["level"] + [f"Fast_{p:g} 95% CI" for p in ps] + ["geomean 95% CI"]
    out = [f'<table class="fastp-ci" data-group="{_e(name)}" data-run="{_e(label)}"><thead><tr>']
    out += [f'<th class="t">{_e(h)}</th>' if i == 0 else f"<th>{_e(h)}</th>" for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for lvl, row in table.items():
        ci = row.get("ci") or {}
        out.append(f'<tr data-level="{_e(lvl)}"><td class="t">{_e((label + " ") if label else "")}'
                   f'{_e(level_label(lvl))}</td>')
        for key in [f"fast_{p:g}" for p in ps]:
            c = ci.get(key)
            out.append(_cell(key, c[0] if c else None, fmt_ci(c, percent=True) or "n/a"))
        g = ci.get("geomean")
        out.append(_cell("geomean", g[0] if g else None, fmt_ci(g) or "—"))
        out.append("</tr>")
    out.append(f'</tbody></table><div class="note">{_e(CI_NOTE)}</div>')
    return "".join(out)


def _kernel_link(row: dict, run_dir: Path) -> str:
    path = candidate_path(row, run_dir)
    if path is None:
        return '<td class="t muted">—</td>'
    if not path.is_file():
        return f'<td class="t muted" title="file not found">{_e(path.name)} (missing)</td>'
    try:
        rel = Path(os.path.relpath(path, run_dir))
        href = quote(rel.as_posix()) if not rel.as_posix().startswith("../") else path.resolve().as_uri()
    except ValueError:
        href = path.resolve().as_uri()
    return f'<td class="t"><a href="{_e(href)}">{_e(path.name)}</a></td>'


def _status(row: dict) -> str:
    if row["correct"]:
        return '<td class="ok" data-key="correct" data-value="1">✓</td>'
    return '<td class="bad" data-key="correct" data-value="0">✗</td>'


def _error(row: dict) -> str:
    kind = row.get("error_kind") or ""
    msg = str(row.get("error_msg") or "")
    stage = str(row.get("stage") or "")
    first = msg.strip().splitlines()[0][:160] if msg.strip() else ""
    text = ": ".join(x for x in (str(kind), first) if x)
    label = stage if stage and stage != "done" else ""
    body = (f'<span class="muted">{_e(label)}</span> ' if label else "") + _e(text)
    return f'<td class="t" title="{_e(msg[:2000])}">{body}</td>'


def tasks_html(name: str, rows: list[dict], run_dir: Path) -> str:
    turns = any("turn" in r for r in rows)
    head = ["task", "level"] + (["turn"] if turns else []) + [
        "correct", "stage / error", "flags", "speedup", "95% CI", "peak fraction", "vs compile", "coverage",
        "runtime ms", "eager ms", "kernel"]
    out = [f'<div class="scroll"><table class="tasks" data-group="{_e(name)}"><thead><tr>']
    out += [f'<th class="t">{_e(h)}</th>' if h in ("task", "stage / error", "flags", "kernel")
            else f"<th>{_e(h)}</th>" for h in head]
    out.append("</tr></thead><tbody>")
    for r in rows:
        out.append(f'<tr data-task="{_e(r["task"])}"><td class="t">{_e(r["task"])}</td>')
        out.append(f"<td>{_e(r['level'] or '?')}</td>")
        if turns:
            out.append(f"<td>{_e(r.get('turn', ''))}</td>")
        out.append(_status(r))
        out.append(_error(r))
        flags = "".join(f'<span class="flag">{_e(f)}</span>' for f in r["flags"])
        out.append(f'<td class="t">{flags}</td>')
        out.append(_cell("speedup", r["speedup"], fmt_x(r["speedup"])))
        ci = r.get("speedup_ci")
        out.append(_cell("speedup_ci", ci[0] if ci else None, fmt_ci(ci) or "—"))
        out.append(_cell("peak_fraction", r.get("peak_fraction"), fmt_pct(r.get("peak_fraction"))))
        out.append(_cell("speedup_compile", r["speedup_compile"], fmt_x(r["speedup_compile"])))
        out.append(_cell("coverage", r["coverage"], fmt_pct(r["coverage"])))
        out.append(_cell("runtime_ms", r["runtime_ms"], fmt_num(r["runtime_ms"])))
        out.append(_cell("ref_runtime_ms", r["ref_runtime_ms"], fmt_num(r["ref_runtime_ms"])))
        out.append(_kernel_link(r, run_dir))
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


_OWN_SECTION = ("provenance", "provenance_history")


def meta_html(run: RunData) -> str:
    items = []
    for key, value in run.meta.items():
        if key in _OWN_SECTION:
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        items.append(f"<dt>{_e(key)}</dt><dd>{_e(text)}</dd>")
    items.append(f"<dt>run directory</dt><dd>{_e(run.path)}</dd>")
    stamp = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    items.append(f"<dt>report written</dt><dd>{_e(stamp)}</dd>")
    return f'<dl class="meta">{"".join(items)}</dl>' + provenance_html(run.meta)


def provenance_html(meta: dict) -> str:
    """What the run ran on (run.json's ``provenance``), and earlier starts' when they differ."""
    prov = meta.get("provenance")
    if not isinstance(prov, dict):
        return ""
    out = ['<h3>Provenance</h3><dl class="meta">']
    out += [f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in provenance_items(prov)]
    out.append("</dl>")
    history = meta.get("provenance_history")
    if isinstance(history, list) and history:
        out.append(f'<p class="muted">{len(history)} earlier start(s) of this run ran elsewhere: '
                   f"{_e(json.dumps(history, default=str))}</p>")
    return "".join(out)


def final_metrics_html(metrics: list[dict]) -> str:
    if not metrics:
        return ""
    last: dict[str, tuple[int, float]] = {}
    for m in metrics:
        for k, v in m.items():
            if k != "step":
                last[k] = (m["step"], v)
    rows = "".join(
        f'<tr><td class="t">{_e(k)}</td><td>{_e(step)}</td>{_cell(k, v, fmt_num(v))}</tr>'
        for k, (step, v) in sorted(last.items()))
    return ('<h3>Latest value of each metric</h3><table class="metrics"><thead><tr>'
            '<th class="t">metric</th><th>step</th><th>value</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>")


def skills_html(skills: list[dict], source: Optional[str]) -> str:
    if not skills:
        return ""
    out = [f"<h2>Skill library</h2><p>{len(skills)} skill(s) in {_e(source)}"]
    if len(skills) > MAX_SKILL_ROWS:
        out.append(f" (first {MAX_SKILL_ROWS} shown)")
    out.append('.</p><div class="scroll"><table class="skills"><thead><tr>'
               '<th class="t">name</th><th class="t">scope</th><th class="t">tags</th>'
               '<th>verify speedup</th><th>step</th><th class="t">source task</th>'
               '<th class="t">description</th></tr></thead><tbody>')
    for s in skills[:MAX_SKILL_ROWS]:
        tags = s.get("tags")
        tags = ", ".join(map(str, tags)) if isinstance(tags, list) else str(tags or "")
        vs = s.get("verify_speedup")
        vs = vs if isinstance(vs, (int, float)) and not isinstance(vs, bool) else None
        out.append(
            f'<tr><td class="t">{_e(s.get("name", ""))}</td><td class="t">{_e(s.get("scope", ""))}</td>'
            f'<td class="t">{_e(tags)}</td>{_cell("verify_speedup", vs, fmt_x(vs))}'
            f'<td>{_e(s.get("step", "") if s.get("step") is not None else "")}</td>'
            f'<td class="t">{_e(s.get("source_task") or "")}</td>'
            f'<td class="t">{_e(s.get("description", ""))}</td></tr>')
    out.append("</tbody></table></div>")
    return "".join(out)


def render_page(run: RunData, tables: dict[str, dict], ps, figures: dict[str, Optional[bytes]]) -> str:
    """The full page. ``figures`` maps figure names (fastp, speedups, roofline, training) to PNG bytes."""
    title = f"dvk report — {run.path.name}"
    parts = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>", meta_html(run),
    ]
    parts += [f'<div class="note">{_e(n)}</div>' for n in run.notes]
    if tables:
        parts.append("<h2>Fast_p</h2><p class=\"muted\">Share of tasks whose kernel is correct and "
                     "more than p× faster than eager PyTorch (Fast_0: correct). Geometric means "
                     "over correct, timed tasks.</p>")
        for name, table in tables.items():
            if name:
                parts.append(f"<h3>{_e(name)} results</h3>")
            parts.append(fastp_html(name, table, ps))
        parts.append(img(figures.get("fastp"), "Fast_p per level"))
    primary = run.primary_group
    if figures.get("speedups"):
        parts.append(f"<h2>Speedup distribution{_e(_group_title(primary or ''))}</h2>")
        parts.append(img(figures["speedups"], "speedups per level"))
    elif run.has_results:
        parts.append("<h2>Speedup distribution</h2><p class=\"muted\">No correct result carries a "
                     "speedup (timing unavailable, e.g. a CPU run).</p>")
    if figures.get("roofline"):
        parts.append(f"<h2>Roofline{_e(_group_title(primary or ''))}</h2><p class=\"muted\">Each timed task's "
                     "fraction of the card's peak: its speed-of-light floor (inputs read once and outputs written "
                     "once at the measured copy bandwidth, or the reference's matrix FLOPs at the measured matmul "
                     "peak of their dtype, whichever is longer) over its timed time.</p>")
        parts.append(img(figures["roofline"], "fraction of peak per task"))
    elif run.has_results:
        parts.append("<h2>Roofline</h2><p class=\"muted\">No result carries a peak fraction (timing "
                     "unavailable, e.g. a CPU run).</p>")
    for name, rows in run.groups.items():
        if rows:
            parts.append(f"<h2>Per task{_e(_group_title(name))}</h2>")
            parts.append(tasks_html(name, rows, run.path))
    if figures.get("training") or run.metrics:
        parts.append("<h2>Training</h2>")
        parts.append(img(figures.get("training"), "training curves"))
        parts.append(final_metrics_html(run.metrics))
    parts.append(skills_html(run.skills, run.skills_file))
    parts.append("</body></html>\n")
    return "".join(parts)
