"""`dvk skills ...`: seeding, JSON output, bad input exit codes, import warnings."""

import json
import subprocess
import sys

import pytest

CONTENT = "## Motivation\\nwhen\\n## Key Idea\\nidea\\n## Example\\n```python\\nx = 1\\n```\\n"


def dvk(*args):
    return subprocess.run([sys.executable, "-m", "davinci_kernel.cli", "skills", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "lib.db")


def test_list_seeds_fresh_store_and_json(db):
    r = dvk("list", "--db", db, "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) >= 20 and {"name", "content", "times_selected"} <= set(rows[0])
    r = dvk("search", "welford variance", "--db", db, "--json", "-k", "3")
    hits = json.loads(r.stdout)
    assert hits[0]["name"] == "welford_layernorm" and hits[0]["score"] > 0
    r = dvk("show", "online_softmax", "--db", db, "--json")
    assert json.loads(r.stdout)["name"] == "online_softmax"
    r = dvk("list", "--db", db)
    assert r.returncode == 0 and "online_softmax" in r.stdout


def test_show_unknown_is_one_line_exit_2(db):
    r = dvk("show", "no_such_skill", "--db", db)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no_such_skill" in r.stderr


def test_import_bad_lines_warns_exit_0_and_export(db, tmp_path):
    p = tmp_path / "in.jsonl"
    good = '{"name": "my_skill", "description": "d", "scope": "general", "tags": ["x"], "content": "' + CONTENT + '"}'
    p.write_text(good + "\n{broken\n")
    r = dvk("import", str(p), "--db", db, "--json")
    assert r.returncode == 0
    out = json.loads(r.stdout)
    assert out["imported"] == 1 and out["errors"][0]["line"] == 2
    assert "in.jsonl:2" in r.stderr
    exp = tmp_path / "out.jsonl"
    r = dvk("export", str(exp), "--db", db, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["exported"] == len(exp.read_text().splitlines())


def test_add_rejects_missing_sections(db, tmp_path):
    f = tmp_path / "s.md"
    f.write_text("---\nname: half_done\ndescription: d\ntags: [a]\n---\n## Motivation\nm\n")
    r = dvk("add", str(f), "--db", db)
    assert r.returncode == 2 and "## Key Idea" in r.stderr
    f.write_text("---\nname: cheat\ndescription: d\n---\n## Motivation\nm\n## Key Idea\n"
                 "Just use torch.compile on it.\n## Example\n```python\nx = 1\n```\n")
    r = dvk("add", str(f), "--db", db)
    assert r.returncode == 2 and "torch.compile" in r.stderr
    f.write_text("---\nname: fine_one\ndescription: d\n---\n## Motivation\nm\n## Key Idea\nk\n"
                 "## Example\n```python\nx = 1\n```\n")
    r = dvk("add", str(f), "--db", db, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["name"] == "fine_one"
