"""`dvk report RUN_A RUN_B ...`: Fast_p side by side with the differences, on hand-written runs.

The numbers on the terminal, in ``--json`` and in compare.html are checked against
``fastp_table`` of each run's own results.jsonl lines; bad input is one line and exit 2.
(Real ``dvk run`` directories are compared in ``test_run_ablations.py``.)
"""

from __future__ import annotations

import json

import pytest
import typer
from test_report_build import make_run_dir, parse

import davinci_kernel.cli as cli
from davinci_kernel.report.commands import register
from davinci_kernel.report.fastp import DEFAULT_PS, fastp_table

KEYS = [f"fast_{p:g}" for p in DEFAULT_PS] + ["geomean", "geomean_compile"]


def _want(lines, group):
    return fastp_table([d for d in lines if d.get("which", group) == group], DEFAULT_PS)


def _same(got: dict, want: dict):
    assert set(got) == {str(k) for k in want}
    for lvl, row in want.items():
        for key in ["n"] + KEYS:
            w = row[key]
            assert got[str(lvl)][key] == (None if w is None else pytest.approx(w, rel=1e-12)), (lvl, key)


@pytest.fixture
def dvk(monkeypatch, capsys):
    """Run ``cli.main`` with an app holding the report command: (exit code, stdout, stderr)."""
    app = typer.Typer(add_completion=False)
    app.callback()(lambda: None)
    register(app)
    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setattr(cli, "_register_all", lambda: None)

    def run(*args):
        with pytest.raises(SystemExit) as exc:
            cli.main(list(args))
        out = capsys.readouterr()
        return exc.value.code, out.out, out.err

    return run


@pytest.fixture
def two_runs(tmp_path):
    a, b = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    return a, make_run_dir(a, seed=31, which=True, training=False), b, make_run_dir(b, seed=32, which=True,
                                                                                     training=False)


def test_json_holds_each_runs_fastp_and_the_differences(dvk, two_runs, tmp_path):
    a, lines_a, b, lines_b = two_runs
    code, out, err = dvk("report", str(a), str(b), "--json", "--out", str(tmp_path / "cmp"))
    assert code == 0, err
    doc = json.loads(out)
    assert [r["label"] for r in doc["runs"]] == ["A", "B"] and doc["levels"] == [1, 2, 3]
    assert doc["report"] == str(tmp_path / "cmp" / "compare.html") and (tmp_path / "cmp" / "compare.png").is_file()
    for group in ("last", "best"):
        want_a, want_b = _want(lines_a, group), _want(lines_b, group)
        _same(doc["fastp"][group]["A"], want_a)
        _same(doc["fastp"][group]["B"], want_b)
        diff = doc["diff"][group]["B-A"]
        for lvl in want_a:
            for key in KEYS:
                x, y = want_a[lvl][key], want_b[lvl][key]
                assert diff[str(lvl)][key] == (None if x is None or y is None else pytest.approx(y - x, abs=1e-12))
    assert not (a / "report.html").exists()  # comparing writes no single-run page


def test_terminal_table_and_page_show_the_same_numbers(dvk, two_runs):
    a, lines_a, b, lines_b = two_runs
    code, out, err = dvk("report", str(a), str(b))
    assert code == 0, err
    page = a.parent / "compare-a-vs-b" / "compare.html"  # the default: next to the first run
    assert f"wrote {page}" in out and "B − A" in out and f"A = {a.resolve()}" in out
    want_a, want_b = _want(lines_a, "best"), _want(lines_b, "best")
    d = want_b["all"]["fast_1"] - want_a["all"]["fast_1"]
    assert f"{100 * d:+.1f} pp" in out
    html = page.read_text()
    tables = [t for t in parse(html).tables if t["attrs"].get("class") == "compare"]
    assert [t["attrs"]["data-group"] for t in tables] == ["last", "best"]
    cells = {(r["attrs"]["data-level"], r["attrs"]["data-run"]): {c["attrs"]["data-key"]: c["attrs"]["data-value"]
                                                                  for c in r["cells"] if "data-key" in c["attrs"]}
             for r in tables[1]["rows"] if "data-run" in r["attrs"]}
    for lvl in want_a:
        for key in KEYS:
            x, y = want_a[lvl][key], want_b[lvl][key]
            for run, want in (("A", x), ("B", y), ("B-A", None if x is None or y is None else y - x)):
                got = cells[(str(lvl), run)][key]
                assert (got == "") if want is None else float(got) == pytest.approx(want, abs=1e-12)
    assert 'src="data:image/png;base64,' in html


def test_three_runs_each_against_the_first(dvk, two_runs, tmp_path):
    a, lines_a, b, _ = two_runs
    c = tmp_path / "runs" / "c"
    lines_c = make_run_dir(c, seed=33, which=True, training=False)
    code, out, err = dvk("report", str(a), str(b), str(c), "--json", "--out", str(tmp_path / "cmp"))
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc["diff"]["best"]) == {"B-A", "C-A"}
    x, y = _want(lines_a, "best")["all"]["fast_0"], _want(lines_c, "best")["all"]["fast_0"]
    assert doc["diff"]["best"]["C-A"]["all"]["fast_0"] == pytest.approx(y - x)


def test_one_result_per_task_counts_as_last_and_best(dvk, two_runs, tmp_path):
    a, lines_a, _, _ = two_runs
    bench = tmp_path / "runs" / "bench"
    lines_bench = make_run_dir(bench, seed=34, which=False, training=False)  # dvk bench: no `which`
    code, out, err = dvk("report", str(bench), str(a), "--json", "--out", str(tmp_path / "cmp"))
    assert code == 0, err
    doc = json.loads(out)
    for group in ("last", "best"):
        _same(doc["fastp"][group]["A"], fastp_table(lines_bench, DEFAULT_PS))


def test_only_levels_every_run_has_are_compared(dvk, two_runs, tmp_path):
    a, lines_a, _, _ = two_runs
    one = tmp_path / "runs" / "level1"
    lines = [d for d in make_run_dir(one, seed=35, which=True, training=False) if d["level"] == 1]
    (one / "results.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))
    code, out, err = dvk("report", str(a), str(one), "--json", "--out", str(tmp_path / "cmp"))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["levels"] == [1] and set(doc["fastp"]["best"]["A"]) == {"1", "all"}
    _same(doc["fastp"]["best"]["A"], _want([d for d in lines_a if d["level"] == 1], "best"))
    assert any("also has level(s) 2, 3" in n for n in doc["notes"])


@pytest.mark.parametrize("case,fragment", [
    ("missing", "run directory not found"),
    ("not_a_run", "nothing to report"),
    ("other_suite", "runs of different suites cannot be compared"),
    ("twice", "run directory given twice"),
    ("self_check", "harness self-check"),
    ("training_only", "compare training runs with training runs"),
    ("no_common_level", "the runs share no level"),
])
def test_runs_that_cannot_be_compared_are_one_line_exit_2(dvk, two_runs, tmp_path, case, fragment):
    a, _, b, _ = two_runs
    other = tmp_path / "other"
    if case == "not_a_run":
        other.mkdir()
        (other / "notes.txt").write_text("hello")
    elif case == "other_suite":
        make_run_dir(other, seed=36, which=True, training=False)
        meta = json.loads((other / "run.json").read_text())
        (other / "run.json").write_text(json.dumps({**meta, "suite": "kernelbench:/data/kb"}))
    elif case == "twice":
        other = a / "." / ""
    elif case == "self_check":
        lines = make_run_dir(other, seed=37, training=False)
        (other / "results.jsonl").write_text("".join(json.dumps({**d, "self_check": True}) + "\n" for d in lines))
    elif case == "training_only":
        make_run_dir(other, seed=38, training=True)
        (other / "results.jsonl").unlink()
    elif case == "no_common_level":
        lines = [d for d in make_run_dir(other, seed=39, which=True, training=False) if d["level"] == 1]
        (other / "results.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))
        a = tmp_path / "l3"
        lines = [d for d in make_run_dir(a, seed=40, which=True, training=False) if d["level"] == 3]
        (a / "results.jsonl").write_text("".join(json.dumps(d) + "\n" for d in lines))
    code, out, err = dvk("report", str(a), str(other), "--out", str(tmp_path / "cmp"))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], err
    assert not (tmp_path / "cmp").exists()


def test_one_suite_spelled_two_ways_is_compared(dvk, two_runs, tmp_path, monkeypatch):
    """A KernelBench folder named relatively in one run and absolutely, with a trailing slash
    and without the prefix, in the other is one suite; another folder is not."""
    a, _, b, _ = two_runs
    kb = tmp_path / "kb"
    kb.mkdir()
    (tmp_path / "kb2").mkdir()
    monkeypatch.chdir(tmp_path)
    for run, suite in ((a, "kernelbench:./kb"), (b, f"{kb}/")):
        meta = json.loads((run / "run.json").read_text())
        (run / "run.json").write_text(json.dumps({**meta, "suite": suite}))
    code, _, err = dvk("report", str(a), str(b), "--json", "--out", str(tmp_path / "cmp"))
    assert code == 0, err
    meta = json.loads((b / "run.json").read_text())
    (b / "run.json").write_text(json.dumps({**meta, "suite": "kernelbench:kb2"}))
    code, _, err = dvk("report", str(a), str(b), "--out", str(tmp_path / "cmp2"))
    assert code == 2 and "runs of different suites cannot be compared" in err


def test_out_with_one_run_is_refused(dvk, two_runs, tmp_path):
    a, _, _, _ = two_runs
    code, out, err = dvk("report", str(a), "--out", str(tmp_path / "cmp"))
    assert code == 2 and "--out is for comparing several runs" in err and not (a / "report.html").exists()
