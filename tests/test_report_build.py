"""build_report on generated run directories: the page holds the numbers of results.jsonl.

Also provides ``make_run_dir`` (random but seeded synthetic runs) to the other report tests.
"""

from __future__ import annotations

import json
import math
import random
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from davinci_kernel.errors import UsageError
from davinci_kernel.files import read_jsonl
from davinci_kernel.records import EvalResult
from davinci_kernel.report.build import build_report
from davinci_kernel.report.fastp import DEFAULT_PS, fastp_table

NASTY_TASK = "level2/99_Odd<script>alert('x')</script>&\"name\""
NASTY_ERROR = "RuntimeError: <b>boom</b> & \"quotes\" 'single'\nsecond line"


def _result(rng: random.Random, task: str, level: int) -> EvalResult:
    r = EvalResult(task=task, level=level, device="cuda", trials=5)
    r.compiled = rng.random() < 0.9
    r.correct = r.compiled and rng.random() < 0.7
    if not r.compiled:
        r.stage, r.error_kind, r.error_msg = "compile", "compile_error", NASTY_ERROR
        return r
    if not r.correct:
        if rng.random() < 0.5:
            r.stage, r.flags = "guards", ["decoy_kernel", "torch_fallback"]
        else:
            r.stage, r.error_kind, r.error_msg = "correctness", "mismatch", "max diff 3.2e-1 > atol"
        return r
    r.stage, r.trials_passed = "done", 5
    if rng.random() < 0.1:  # correct but not timed
        return r
    r.timing_available = True
    r.ref_runtime_ms = rng.uniform(0.05, 5.0)
    r.speedup = math.exp(rng.gauss(0.15, 0.6))
    r.runtime_ms = r.ref_runtime_ms / r.speedup
    r.compile_runtime_ms = r.ref_runtime_ms / math.exp(rng.gauss(0.1, 0.2))
    r.speedup_compile = r.compile_runtime_ms / r.runtime_ms
    r.coverage = rng.uniform(0.2, 1.0)
    return r


def make_run_dir(root: Path, seed: int = 0, which: bool = False, training: bool = True,
                 meta: bool = True) -> list[dict]:
    """Write a synthetic RUN_DIR under ``root``; return the results.jsonl lines as dicts."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for level, count in ((1, rng.randint(8, 14)), (2, rng.randint(8, 14)), (3, rng.randint(4, 8))):
        for i in range(count):
            task = NASTY_TASK if (level, i) == (2, 0) else f"level{level}/{i + 1}_Op{rng.randint(0, 999)}"
            groups = ("last", "best") if which else ("",)
            for g in groups:
                d = _result(rng, task, level).to_dict()
                if g:
                    d["which"] = g
                    d["turn"] = rng.randint(0, 2)
                if i % 3 == 0:
                    rel = f"candidates/level{level}/{i}_{g or 'k'}.py"
                    (root / rel).parent.mkdir(parents=True, exist_ok=True)
                    (root / rel).write_text("class ModelNew: pass\n")
                    d["candidate"] = rel
                elif i % 3 == 1:
                    d["candidate"] = "candidates/never_written.py"
                lines.append(d)
    rng.shuffle(lines)
    (root / "results.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))
    if meta:
        (root / "run.json").write_text(json.dumps({
            "suite": "builtin", "model": "openai:http://x#<Model&Co>", "device": "cuda",
            "gpu": "NVIDIA H200", "torch": "2.11.0", "date": "2026-11-29"}))
    if training:
        steps, reward, size = rng.randint(15, 40), 0.2, 0
        with open(root / "metrics.jsonl", "w") as fh:
            for step in range(steps):
                reward += rng.gauss(0.02, 0.05)
                size += rng.random() < 0.4
                fh.write(json.dumps({
                    "step": step, "reward/mean": reward, "reward/policy": reward * 0.9,
                    "fast_1/level1": min(1.0, 0.2 + step * 0.01 + rng.random() * 0.05),
                    "fast_1/level2": min(1.0, 0.4 + step * 0.01 + rng.random() * 0.05),
                    "skills/size": size, "loss/policy": rng.gauss(0, 0.1),
                    "tokens_per_s": rng.uniform(900, 1100)}) + "\n")
        with open(root / "skills.jsonl", "w") as fh:
            for k in range(size):
                fh.write(json.dumps({"name": f"skill_{k}", "description": "tile <K> & fuse",
                                     "scope": "general", "tags": ["tiling"], "content": "## Motivation",
                                     "verify_speedup": 1.2 + k / 10, "step": k}) + "\n")
    return lines


class _Tables(HTMLParser):
    """Collects every <table>: its attributes and rows of (attrs, text) cells."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables: list[dict] = []
        self._cell = None
        self.imgs: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"attrs": a, "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append({"attrs": a, "cells": []})
        elif tag in ("td", "th") and self.tables and self.tables[-1]["rows"]:
            self._cell = {"attrs": a, "text": ""}
            self.tables[-1]["rows"][-1]["cells"].append(self._cell)
        elif tag == "img":
            self.imgs.append(a.get("src", ""))

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data


def parse(html: str) -> _Tables:
    p = _Tables()
    p.feed(html)
    return p


def fastp_from_html(tables: _Tables, group: str = "") -> dict[str, dict[str, tuple]]:
    """{level attr: {key: (data-value, text)}} of the Fast_p table of ``group``."""
    [t] = [t for t in tables.tables if t["attrs"].get("class") == "fastp"
           and t["attrs"].get("data-group") == group]
    out = {}
    for row in t["rows"]:
        if "data-level" in row["attrs"]:
            out[row["attrs"]["data-level"]] = {
                c["attrs"]["data-key"]: (c["attrs"]["data-value"], c["text"])
                for c in row["cells"] if "data-key" in c["attrs"]}
    return out


def _text_value(text: str):
    if text == "—":
        return None
    if text.endswith("%"):
        return float(text[:-1]) / 100.0
    return float(text.rstrip("×"))


def _check_fastp(html_table, expected):
    assert set(html_table) == {str(k) for k in expected}
    for lvl, row in expected.items():
        cells = html_table[str(lvl)]
        for key in ["n"] + [f"fast_{p:g}" for p in DEFAULT_PS] + ["geomean", "geomean_compile"]:
            value, text = cells[key]
            want = row[key]
            if want is None:  # unknown: a Fast_p (p > 0) with nothing correct timed reads n/a
                assert value == "" and text == ("n/a" if key.startswith("fast_") else "—"), (lvl, key)
                continue
            assert float(value) == pytest.approx(want, rel=1e-12), (lvl, key)
            assert _text_value(text) == pytest.approx(want, abs=6e-4), (lvl, key, text)


def _own_fast_1(lines, level):
    rows = [d for d in lines if d["level"] == level]
    return sum(1 for d in rows if d["correct"] and (d["speedup"] or 0) > 1.0) / len(rows)


def test_page_holds_fastp_numbers_of_results(tmp_path):
    run = tmp_path / "run"
    lines = make_run_dir(run, seed=1)
    page = build_report(run)
    assert page == run.resolve() / "report.html"
    html = page.read_text(encoding="utf-8")
    expected = fastp_table([EvalResult.from_dict(d) for d in read_jsonl(run / "results.jsonl")], DEFAULT_PS)
    got = fastp_from_html(parse(html))
    _check_fastp(got, expected)
    for level in (1, 2, 3):  # a second, hand-computed check of Fast_1
        assert float(got[str(level)]["fast_1"][0]) == pytest.approx(_own_fast_1(lines, level))
    assert expected["all"]["n"] == len(lines)
    for name in ("fastp.png", "speedups.png", "training.png"):
        assert (run / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_per_task_table_matches_each_result(tmp_path):
    run = tmp_path / "run"
    lines = make_run_dir(run, seed=2, training=False)
    html = build_report(run).read_text(encoding="utf-8")
    tables = parse(html)
    [t] = [t for t in tables.tables if t["attrs"].get("class") == "tasks"]
    rows = {r["attrs"]["data-task"]: r for r in t["rows"] if "data-task" in r["attrs"]}
    assert set(rows) == {d["task"] for d in lines}
    for d in lines:
        cells = {c["attrs"]["data-key"]: c for c in rows[d["task"]]["cells"] if "data-key" in c["attrs"]}
        assert cells["correct"]["attrs"]["data-value"] == ("1" if d["correct"] else "0")
        for key in ("speedup", "speedup_compile", "coverage", "runtime_ms", "ref_runtime_ms"):
            value = cells[key]["attrs"]["data-value"]
            assert (value == "") if d[key] is None else float(value) == pytest.approx(d[key])
        text = " ".join(c["text"] for c in rows[d["task"]]["cells"])
        for flag in d["flags"]:
            assert flag in text
    # kernel links: existing files are linked relative to RUN_DIR, missing ones are marked
    links = re.findall(r'<a href="([^"]+)">', html)
    want = {d["candidate"] for d in lines if (run / d.get("candidate", "-")).is_file()}
    assert want and set(links) == want
    assert "(missing)" in html


def test_text_is_escaped_and_page_is_self_contained(tmp_path):
    run = tmp_path / "run"
    make_run_dir(run, seed=3)
    html = build_report(run).read_text(encoding="utf-8")
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "&lt;Model&amp;Co&gt;" in html and "<b>boom" not in html
    tables = parse(html)
    assert NASTY_TASK in {r["attrs"].get("data-task") for t in tables.tables for r in t["rows"]}
    assert tables.imgs and all(src.startswith("data:image/png;base64,") for src in tables.imgs)
    assert not re.search(r"<link|<script|@import|url\(|src=\"(?!data:)", html, re.I)


def test_best_and_last_groups_get_their_own_tables(tmp_path):
    run = tmp_path / "run"
    lines = make_run_dir(run, seed=4, which=True, training=False)
    tables = parse(build_report(run).read_text(encoding="utf-8"))
    for group in ("best", "last"):
        rows = [EvalResult.from_dict(d) for d in lines if d["which"] == group]
        _check_fastp(fastp_from_html(tables, group), fastp_table(rows, DEFAULT_PS))
    groups = [t["attrs"]["data-group"] for t in tables.tables if t["attrs"].get("class") == "fastp"]
    assert groups == ["best", "last"]


def test_training_only_run_and_latest_metrics(tmp_path):
    run = tmp_path / "run"
    make_run_dir(run, seed=5, meta=False)
    (run / "results.jsonl").unlink()
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    html = build_report(run).read_text(encoding="utf-8")
    assert not (run / "fastp.png").exists() and (run / "training.png").exists()
    [t] = [t for t in parse(html).tables if t["attrs"].get("class") == "metrics"]
    values = {c["attrs"]["data-key"]: float(c["attrs"]["data-value"])
              for r in t["rows"] for c in r["cells"] if "data-key" in c["attrs"]}
    assert values["reward/mean"] == pytest.approx(metrics[-1]["reward/mean"])
    assert values["skills/size"] == metrics[-1]["skills/size"]
    assert "Skill library" in html


def test_bad_run_json_is_a_note_bad_result_lines_are_refused(tmp_path):
    run = tmp_path / "run"
    lines = make_run_dir(run, seed=6, training=False, meta=False)
    (run / "run.json").write_text("{not json")
    html = build_report(run).read_text(encoding="utf-8")
    assert "run.json: not valid JSON" in html
    expected = fastp_table([EvalResult.from_dict(d) for d in lines], DEFAULT_PS)
    _check_fastp(fastp_from_html(parse(html)), expected)
    with open(run / "results.jsonl", "a") as fh:
        fh.write('{"task": "level1/trunc\n')
    with pytest.raises(UsageError, match=r"line \d+ is not an evaluation result \(not JSON"):
        build_report(run)


def test_timing_unavailable_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [EvalResult(task=f"level1/{i}_Op", level=1, compiled=True, correct=i % 2 == 0,
                       stage="done", device="cpu").to_dict() for i in range(5)]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    html = build_report(run).read_text(encoding="utf-8")
    assert not (run / "speedups.png").exists() and "timing unavailable" in html
    table = fastp_table(rows, DEFAULT_PS)
    assert table[1]["fast_0"] == 0.6 and table[1]["fast_1"] is None  # n/a, not 0 %
    _check_fastp(fastp_from_html(parse(html)), table)
