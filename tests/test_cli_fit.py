"""Tables and help that fit an 80-column terminal and a pipe; ``-h`` wherever ``--help`` works.

Run as a user would: ``dvk`` in a child process with ``COLUMNS`` set and stdout a pipe.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from conftest import run_dvk

from davinci_kernel.clihelp import value_name
from davinci_kernel.tables import Col, fit


def _env(columns: int) -> dict:
    return {**os.environ, "COLUMNS": str(columns), "TERM": "dumb", "NO_COLOR": "1"}


def _lines_fit(text: str, width: int) -> None:
    long = [line for line in text.splitlines() if len(line) > width]
    assert not long, f"lines wider than {width}: {long[:3]}"
    assert "…" not in text, "a value was cut with an ellipsis"


def _commands():
    """The root command (as ``dvk`` builds it) and the path of every command under it."""
    from davinci_kernel import cli

    cli._register_all()
    root = cli._command()
    paths: list[list[str]] = []

    def walk(cmd, path):
        paths.append(path)
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, path + [name])

    walk(root, [])
    return root, paths


@pytest.mark.parametrize("columns", [80, 60])
def test_skills_list_fits_with_every_name_whole(columns, tmp_path):
    db = tmp_path / "lib.db"
    j = run_dvk(["skills", "list", "--db", db, "--json"])
    assert j.returncode == 0, j.stderr[-2000:]
    doc = json.loads(j.stdout)
    names = [s["name"] for s in (doc["skills"] if isinstance(doc, dict) else doc)]
    assert len(names) >= 20
    p = run_dvk(["skills", "list", "--db", db], env=_env(columns))
    assert p.returncode == 0, p.stderr[-2000:]
    _lines_fit(p.stdout, columns)
    rows = {line.split()[0] for line in p.stdout.splitlines() if line.strip()}
    assert set(names) <= rows, f"names not whole: {sorted(set(names) - rows)[:5]}"
    assert "speedup" in p.stdout.splitlines()[1]  # the speedup column stays
    assert "Left out to fit" in p.stdout  # and the table says what it left out


def test_skills_search_fits_80_columns(tmp_path):
    p = run_dvk(["skills", "search", "online softmax reduction", "-k", "5", "--db", tmp_path / "lib.db"],
                env=_env(80))
    assert p.returncode == 0, p.stderr[-2000:]
    _lines_fit(p.stdout, 80)
    assert "online_softmax" in p.stdout


@pytest.mark.parametrize("columns", [80, 40])
def test_tasks_list_shows_names_whole(columns):
    j = json.loads(run_dvk(["tasks", "list", "--json"]).stdout)
    p = run_dvk(["tasks", "list"], env=_env(columns))
    assert p.returncode == 0, p.stderr[-2000:]
    _lines_fit(p.stdout, columns)
    flat = "".join(p.stdout.split())  # a name wider than its column is folded onto the next lines
    assert all(t["spec"] in flat for t in j["tasks"]) and "…" not in p.stdout  # whole, never cut


def test_a_wide_terminal_gets_every_column():
    cols = [Col("name", whole=True), Col("a", 1), Col("b", 2)]
    rows = [("x" * 30, "some words here", "more words")]
    assert fit(cols, rows, 200) == [0, 1, 2]
    assert fit(cols, rows, 45) == [0, 1, 2]  # text columns wrap between words first
    assert fit(cols, rows, 40) == [0, 1]  # then the last-ranked column goes
    assert fit(cols, rows, 20) == [0]  # a name alone wider than the screen is still printed (folded)


def test_value_names_are_readable():
    assert value_name("<str>") == "TEXT" and value_name("<int>") == "INTEGER"
    assert value_name("<list[str]>") == "TEXT ..." and value_name("<path>") == "PATH"
    assert value_name("<on|off>") == "on|off" and value_name(None) is None


def test_every_command_answers_dash_h_like_help_with_readable_placeholders(capsys):
    root, paths = _commands()
    assert ["eval"] in paths and ["skills", "list"] in paths and ["train", "rl"] in paths
    for path in paths:
        outs = []
        for flag in ("-h", "--help"):
            rv = root.main(args=[*path, flag], prog_name="dvk", standalone_mode=False)
            assert rv in (None, 0), (path, flag)
            outs.append(capsys.readouterr().out)
        assert outs[0] == outs[1], path
        text = outs[0]
        assert "Usage: dvk" in text, path
        assert not re.search(r"<(str|int|float|path|bool|list\[[^\]]*\])>", text), (path, text[:2000])
        usage = next(line for line in text.splitlines() if "Usage:" in line)
        assert "{" not in usage, usage


def test_help_in_a_pipe_at_80_columns_names_arguments_plainly():
    p = run_dvk(["eval", "-h"], env=_env(80))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Usage: dvk eval [OPTIONS] PROBLEM CANDIDATE" in p.stdout
    _lines_fit(p.stdout, 80)
    r = run_dvk(["report", "-h"], env=_env(80))
    assert "Usage: dvk report [OPTIONS] RUN_DIR..." in r.stdout
