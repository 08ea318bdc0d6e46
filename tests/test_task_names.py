"""Tasks by name: `builtin:level1/3_Softmax`, `kernelbench:DIR:level1/19_ReLU` and a path work
wherever a problem is taken; `dvk tasks show` prints the source and path; `dvk tasks list`
prints names that can be given back as they are."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import FIXTURES
from conftest import run_dvk as dvk

from davinci_kernel.tasks import BUILTIN_DIR, REFERENCE_DIR, SuiteError, load_task


@pytest.fixture
def kb(tmp_path):
    d = tmp_path / "kb" / "level1"
    d.mkdir(parents=True)
    shutil.copy(FIXTURES / "tasks" / "relu.py", d / "19_ReLU.py")
    return tmp_path / "kb"


def test_load_task_by_every_spelling(kb, tmp_path, monkeypatch):
    softmax = (BUILTIN_DIR / "level1" / "3_Softmax.py").read_text()
    for spec in ("builtin:level1/3_Softmax", "builtin:level1/3_Softmax.py", "builtin:3_Softmax", "level1/3_Softmax"):
        t = load_task(spec)
        assert t.name == "level1/3_Softmax" and t.source == softmax and t.suite == "builtin", spec
    t = load_task(f"kernelbench:{kb}:level1/19_ReLU")
    assert t.name == "level1/19_ReLU" and t.path == str(kb / "level1" / "19_ReLU.py")
    assert load_task(kb / "level1" / "19_ReLU.py").source == t.source  # a path still works
    monkeypatch.chdir(tmp_path)
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "3_Softmax.py").write_text(t.source)  # a file wins over the built-in name
    assert load_task("level1/3_Softmax.py").source == t.source
    assert load_task("level1/3_Softmax").source == softmax  # no such file: the built-in task


@pytest.mark.parametrize("spec,fragment", [
    ("builtin:level1/99_Nope", "no task 'level1/99_Nope'"),
    ("builtin:", "no task named"),
    ("kernelbench:/nowhere", "give the suite and the task"),
    ("Softmax", "did you mean level1/3_Softmax"),
    ("missing.py", "problem file not found: missing.py"),
])
def test_bad_names_say_how_to_name_a_task(spec, fragment):
    with pytest.raises(SuiteError) as e:
        load_task(spec)
    assert fragment in str(e.value)


def test_eval_takes_a_builtin_name(tmp_path):
    cand = REFERENCE_DIR / "level1" / "3_Softmax.py"
    p = dvk(["eval", "builtin:level1/3_Softmax", cand, "--device", "cpu", "--json"], timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout)
    assert res["task"] == "level1/3_Softmax" and res["correct"] is True


def test_eval_takes_a_kernelbench_name(kb):
    p = dvk(["eval", f"kernelbench:{kb}:level1/19_ReLU", FIXTURES / "legit" / "relu_triton.py", "--device", "cpu",
             "--json"], timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["correct"] is True


def test_tasks_show_prints_source_and_path(kb):
    p = dvk(["tasks", "show", "builtin:level1/3_Softmax"], timeout=120)
    path = BUILTIN_DIR / "level1" / "3_Softmax.py"
    assert p.returncode == 0, p.stderr
    assert p.stdout == path.read_text()  # `dvk tasks show NAME > problem.py` copies it
    assert str(path) in p.stderr
    p = dvk(["tasks", "show", f"kernelbench:{kb}:level1/19_ReLU", "--json"], timeout=120)
    doc = json.loads(p.stdout)
    assert doc["path"] == str(kb / "level1" / "19_ReLU.py") and "class Model" in doc["source"]
    p = dvk(["tasks", "show", "builtin:level1/99_Nope"], timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


def test_tasks_list_names_are_whole_and_loadable(kb):
    env = dict(__import__("os").environ, COLUMNS="80")
    p = dvk(["tasks", "list", "--suite", f"kernelbench:{kb}"], env, timeout=120)
    assert p.returncode == 0, p.stderr
    spec = f"kernelbench:{kb}:level1/19_ReLU"
    assert spec in "".join(p.stdout.split()) and "…" not in p.stdout  # whole (folded at 80 columns, never cut)
    assert load_task(spec).name == "level1/19_ReLU"
    p = dvk(["tasks", "list", "--json"], timeout=120)
    specs = [t["spec"] for t in json.loads(p.stdout)["tasks"]]
    assert "builtin:level1/3_Softmax" in specs and all(load_task(s) for s in specs[:3])
