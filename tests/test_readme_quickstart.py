"""The README's quick start runs exactly as written, on the CPU, from a copy of the repository's
examples in a temporary folder; the README shows the example files as they are, and its
set-up commands are the ones CI runs."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def section(name: str) -> str:
    """The text between the README's ``--8<-- [start:NAME]`` and ``[end:NAME]`` markers
    (the same markers the docs build includes the section by)."""
    text = README.read_text(encoding="utf-8")
    m = re.search(rf"<!-- --8<-- \[start:{name}\] -->\n(.*?)<!-- --8<-- \[end:{name}\] -->", text, re.S)
    assert m, f"README has no {name} section"
    return m.group(1)


def commands(name: str) -> list[list[str]]:
    """Each command line of the section's shell block, comments dropped, split as a shell would."""
    block = re.search(r"```bash\n(.*?)```", section(name), re.S)
    assert block, f"no bash block in the README's {name} section"
    lines = [line.split(" #")[0].strip() for line in block.group(1).splitlines()]
    return [shlex.split(line) for line in lines if line and not line.startswith("#")]


def test_quickstart_commands_run_as_written(tmp_path):
    cmds = commands("quickstart")
    assert [c[:2] for c in cmds] == [["dvk", "eval"], ["dvk", "bench"], ["dvk", "report"]]
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    outs = []
    for cmd in cmds:
        p = subprocess.run([sys.executable, "-m", "davinci_kernel.cli", *cmd[1:]], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, (cmd, p.stdout[-2000:], p.stderr[-3000:])
        outs.append(p.stdout)
    ev, bench, report = outs
    assert "correct" in ev and "5/5" in ev and "incorrect" not in ev
    assert "100.0%" in bench  # Fast_0 of the one level
    run = tmp_path / "runs" / "quickstart"
    (row,) = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    assert row["task"] == "level1/1_SiLU" and row["correct"] is True and not row["flags"]
    assert (run / "report.html").is_file() and "report.html" in report
    assert json.loads((run / "run.json").read_text())["provenance"]["python"]


def test_readme_shows_the_example_files_as_they_are():
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    for rel in ("examples/quickstart/problems/level1/1_SiLU.py", "examples/quickstart/kernels/level1/1_SiLU.py"):
        assert f"`{rel}`" in text
        assert (ROOT / rel).read_text(encoding="utf-8") in blocks, f"the README's copy of {rel} differs from the file"


def test_setup_commands_are_the_ones_ci_runs():
    setup = commands("setup")
    assert " ".join(setup[0]).endswith("&& dvk bench --suite builtin --candidates reference")
    assert setup[1] == ["python", "-m", "pytest", "-q"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python -m pytest -q" in ci and "mkdocs build --strict" in ci


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README has {len(lines)} lines; move detail into docs/"
    assert "Drafted section" not in (ROOT / "configs" / "README.md").read_text(encoding="utf-8")


def test_readme_links_and_images_resolve():
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert "docs/img/quickstart-report.png" in local
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"
