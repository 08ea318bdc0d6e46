"""The HTML of a comparison of runs: one self-contained page, Fast_p side by side.

Covers: the list of runs (label, directory with a link to its own report when there is
one, settings from run.json), notes, one table per result group (``last`` / ``best`` turn)
with, per level, a row per run and a row per difference to the first run (B − A), and the
comparison figure. Cells carry ``data-key`` / ``data-value`` with the exact numbers (rows:
``data-level`` and ``data-run``, ``A`` or ``B-A``) so tools can read them back. Also the
formats of differences shared with the terminal table. Does not cover computing the
numbers (compare.py) or writing files (build.py).
"""

from __future__ import annotations

import os
from html import escape
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote

from .compare import Comparison, run_summary
from .fastp import NA_NOTE, timing_unavailable
from .page import CSS, ci_html, fmt_fastp, fmt_x, img
from .plots import level_label

REPORT_NAME = "report.html"


def fmt_dpp(d: Optional[float]) -> str:
    """A difference of two shares in percentage points (``n/a`` when either is unknown)."""
    return "n/a" if d is None else f"{100.0 * d:+.1f} pp"


def fmt_dx(d: Optional[float]) -> str:
    """A difference of two geometric-mean speedups (``—`` when either is missing)."""
    return "—" if d is None else f"{d:+.3f}×"


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _cell(key: str, value: Optional[float], text: str) -> str:
    dv = "" if value is None else repr(float(value))
    return f'<td data-key="{_e(key)}" data-value="{_e(dv)}">{_e(text)}</td>'


def _run_link(path: Path, out_dir: Path) -> str:
    page = path / REPORT_NAME
    if not page.is_file():
        return _e(path)
    try:
        href = quote(Path(os.path.relpath(page, out_dir)).as_posix())
    except ValueError:  # another drive
        href = page.as_uri()
    return f'<a href="{_e(href)}">{_e(path)}</a>'


def runs_html(comp: Comparison, out_dir: Path) -> str:
    out = ['<table class="runs"><thead><tr><th class="t">run</th><th class="t">directory</th>'
           '<th class="t">settings (run.json)</th></tr></thead><tbody>']
    for label, run in zip(comp.labels, comp.runs):
        out.append(f'<tr data-run="{_e(label)}"><td class="t"><b>{_e(label)}</b></td>'
                   f'<td class="t">{_run_link(run.path, out_dir)}</td><td class="t">{_e(run_summary(run))}</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


def _row(level, run_key: str, run_text: str, cells: list[str], first: bool, bold: bool = False) -> str:
    cls = ' class="diff"' if bold else ""
    lvl = f'<td class="t">{_e(level_label(level))}</td>' if first else '<td class="t"></td>'
    return (f'<tr{cls} data-level="{_e(level)}" data-run="{_e(run_key)}">{lvl}'
            f'<td class="t">{_e(run_text)}</td>{"".join(cells)}</tr>')


def group_html(comp: Comparison, group: str) -> str:
    ps = comp.ps
    head = ["level", "run", "n"] + [f"Fast_{p:g}" for p in ps] + ["geomean vs eager", "geomean vs compile"]
    out = [f'<table class="compare" data-group="{_e(group)}"><thead><tr>']
    out += [f'<th class="t">{_e(h)}</th>' if i < 2 else f"<th>{_e(h)}</th>" for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    tables, diffs = comp.tables[group], comp.diffs[group]
    for lvl in tables[0]:
        for i, (label, table) in enumerate(zip(comp.labels, tables)):
            row = table[lvl]
            cells = [_cell("n", row["n"], str(row["n"]))]
            cells += [_cell(f"fast_{p:g}", row[f"fast_{p:g}"], fmt_fastp(row[f"fast_{p:g}"])) for p in ps]
            cells += [_cell(k, row.get(k), fmt_x(row.get(k))) for k in ("geomean", "geomean_compile")]
            out.append(_row(lvl, label, label, cells, first=i == 0))
        for i, diff in enumerate(diffs, 1):
            d = diff[lvl]
            cells = ["<td></td>"]
            cells += [_cell(f"fast_{p:g}", d[f"fast_{p:g}"], fmt_dpp(d[f"fast_{p:g}"])) for p in ps]
            cells += [_cell(k, d.get(k), fmt_dx(d.get(k))) for k in ("geomean", "geomean_compile")]
            out.append(_row(lvl, comp.diff_label(i), f"{comp.labels[i]} − {comp.labels[0]}", cells,
                            first=False, bold=True))
    out.append("</tbody></table>")
    if any(timing_unavailable(t) for t in tables):
        out.append(f'<div class="note">{_e(NA_NOTE)}</div>')
    out += [ci_html(group, t, ps, label) for label, t in zip(comp.labels, tables)]
    out += [paired_html(comp, i, pd) for i, pd in enumerate(comp.paired.get(group, []), 1)]
    return "".join(out)


def paired_html(comp: Comparison, i: int, pd) -> str:
    """The paired bootstrap of run ``i`` against the first: per figure the difference, its
    95 % interval and whether it is significant (the interval excludes no change)."""
    a, b = comp.labels[0], comp.labels[i]
    if not pd:
        return f'<div class="note">{_e(b)} − {_e(a)}: no task in both runs, no paired test</div>'
    out = [f'<table class="paired" data-run="{_e(comp.diff_label(i))}"><thead><tr><th class="t">{_e(b)} − {_e(a)}'
           f' (paired bootstrap, {pd["tasks"]} shared tasks)</th><th>difference</th><th>95% interval</th>'
           '<th class="t">verdict</th></tr></thead><tbody>']
    for p in comp.ps:
        key = f"fast_{p:g}"
        d = pd.get(key)
        if d is None:
            out.append(f'<tr data-key="{key}"><td class="t">Fast_{p:g}</td><td>n/a</td><td>—</td><td class="t">'
                       'not timed in both runs</td></tr>')
            continue
        verdict = "significant" if d["significant"] else "not significant"
        out.append(f'<tr data-key="{key}" data-significant="{int(d["significant"])}"><td class="t">Fast_{p:g}</td>'
                   f'<td>{_e(fmt_dpp(d["diff"]))}</td><td>[{_e(fmt_dpp(d["ci"][0]))}, {_e(fmt_dpp(d["ci"][1]))}]</td>'
                   f'<td class="t">{verdict}</td></tr>')
    g = pd.get("geomean")
    if g:
        verdict = "significant" if g["significant"] else "not significant"
        out.append(f'<tr data-key="geomean" data-significant="{int(g["significant"])}"><td class="t">geomean '
                   f'ratio</td><td>{g["ratio"]:.3f}×</td><td>[{g["ci"][0]:.3f}×, {g["ci"][1]:.3f}×]</td>'
                   f'<td class="t">{verdict}</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


def render_compare_page(comp: Comparison, out_dir: Path, figure: Optional[bytes]) -> str:
    names = ", ".join(f"{lab} = {run.path.name}" for lab, run in zip(comp.labels, comp.runs))
    title = f"dvk report — comparing {names}"
    parts = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>{_e(title)}</title><style>{CSS}tr.diff td{{font-weight:600;background:#eef4fb}}</style>"
        "</head><body>",
        f"<h1>{_e(title)}</h1>", runs_html(comp, out_dir),
    ]
    parts += [f'<div class="note">{_e(n)}</div>' for n in comp.notes]
    parts.append("<h2>Fast_p side by side</h2><p class=\"muted\">Share of tasks whose kernel is correct and "
                 "more than p× faster than eager PyTorch (Fast_0: correct), at the last and at the best turn "
                 f"of each task; levels every run has ({', '.join(map(str, comp.levels))}). Rows "
                 f"“{comp.labels[-1]} − {comp.labels[0]}” are differences to run {comp.labels[0]}: percentage "
                 "points for shares, × for geometric means (over correct, timed tasks).</p>")
    for group in comp.tables:
        parts.append(f"<h3>{_e(group)} turn</h3>")
        parts.append(group_html(comp, group))
    parts.append(img(figure, "Fast_p of each run per level"))
    parts.append("</body></html>\n")
    return "".join(parts)
