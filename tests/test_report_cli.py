"""`dvk report RUN_DIR` through the CLI entry point: output, exit codes, one-line errors."""

from __future__ import annotations

import json

import pytest
import typer
from test_report_build import make_run_dir

import davinci_kernel.cli as cli
from davinci_kernel.report.commands import register
from davinci_kernel.report.fastp import DEFAULT_PS, fastp_table


@pytest.fixture
def dvk(monkeypatch, capsys):
    """Run ``cli.main`` with an app holding the report command (other stages left out)."""
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


def test_report_prints_path_and_table(dvk, tmp_path):
    run = tmp_path / "run"
    lines = make_run_dir(run, seed=21, training=False)
    code, out, err = dvk("report", str(run))
    assert code == 0, err
    assert f"wrote {run.resolve() / 'report.html'}" in out
    assert (run / "report.html").is_file()
    table = fastp_table(lines, DEFAULT_PS)
    assert f"{100 * table['all']['fast_1']:.1f}%" in out
    assert f"{table['all']['geomean']:.3f}×" in out


def test_report_json(dvk, tmp_path):
    run = tmp_path / "run"
    lines = make_run_dir(run, seed=22, which=True)
    code, out, _ = dvk("report", str(run), "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc["figures"]) == {"fastp", "speedups", "training"}
    for group in ("best", "last"):
        want = fastp_table([d for d in lines if d["which"] == group], DEFAULT_PS)
        got = doc["fastp"][group]
        assert set(got) == {str(k) for k in want}
        for lvl, row in want.items():  # geomeans summed in another order: compare with approx
            assert set(got[str(lvl)]) == set(row)
            for key, value in row.items():
                if key == "ci":  # the intervals: the same bootstrap of the same numbers
                    assert set(got[str(lvl)][key]) == set(value)
                    for k, v in value.items():
                        assert got[str(lvl)][key][k] == (v if v is None else pytest.approx(v, rel=1e-9))
                    continue
                assert got[str(lvl)][key] == (value if value is None else pytest.approx(value, rel=1e-12))


@pytest.mark.parametrize("case", ["missing", "empty", "file", "blank_results"])
def test_bad_run_dir_is_one_line_exit_2(dvk, tmp_path, case):
    target = tmp_path / "run"
    if case == "empty":
        target.mkdir()
    elif case == "file":
        target.write_text("{}")
    elif case == "blank_results":
        target.mkdir()
        (target / "results.jsonl").write_text("\n\n")
    code, out, err = dvk("report", str(target))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(target) in lines[0]
    assert not (tmp_path / "run" / "report.html").exists()
