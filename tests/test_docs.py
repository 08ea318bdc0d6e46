"""The docs: a strict MkDocs build, references generated from the code, broken links caught.

The command-line and configuration references are made by ``davinci_kernel.docref`` during
the build: they list every command, option and configuration key there is now, so they
cannot go stale. A strict build fails on a link to a missing anchor.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from davinci_kernel import docref
from davinci_kernel.config import help_table

ROOT = Path(__file__).resolve().parent.parent


def _build(root: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=root, capture_output=True, text=True, timeout=120, env=env)


def _command_paths() -> list[str]:
    root = docref._root_command()
    out: list[str] = []

    def walk(cmd, path):
        for name, sub in getattr(cmd, "commands", {}).items():
            out.append(f"{path} {name}")
            walk(sub, f"{path} {name}")

    walk(root, "dvk")
    return out


def test_cli_reference_lists_every_command_and_option():
    page = docref.cli_markdown()
    root = docref._root_command()
    for path in _command_paths():
        assert f"\n## {path}\n" in page, path
        cmd = root
        for name in path.split()[1:]:
            cmd = cmd.commands[name]
        for p in cmd.params:
            for opt in getattr(p, "opts", []):
                if opt.startswith("-"):
                    assert f"`{opt}`" in page, (path, opt)
    assert "<str>" not in page and "{problem}" not in page
    assert "| `-h`, `--help` |" in page  # the short help option is documented as it works


def test_config_reference_lists_every_key_with_its_help():
    page = docref.config_markdown()
    rows = help_table()
    assert len(rows) > 100
    for key, _default, help_ in rows:
        assert f"| `{key}` |" in page, key
        assert help_.split()[0].replace("|", "\\|") in page, key


def test_strict_build_has_the_generated_pages(tmp_path):
    p = _build(ROOT, tmp_path / "site")
    assert p.returncode == 0, p.stderr[-4000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert 'id="dvk-eval"' in cli and 'id="dvk-skills-list"' in cli and 'id="dvk-train-rl"' in cli
    conf = (tmp_path / "site" / "reference" / "config" / "index.html").read_text(encoding="utf-8")
    assert "eval.sandbox" in conf and "rl.joint_training" in conf
    assert (tmp_path / "site" / "results" / "img" / "reference_kernels_h200.png").is_file()
    quick = (tmp_path / "site" / "quickstart" / "index.html").read_text(encoding="utf-8")
    assert "examples/quickstart/kernels" in quick and "silu_kernel" in quick  # README and example included


def test_a_broken_anchor_fails_the_strict_build(tmp_path):
    copy = tmp_path / "repo"
    copy.mkdir()
    for name in ("docs", "examples"):
        shutil.copytree(ROOT / name, copy / name)
    shutil.copytree(ROOT / "bench" / "results", copy / "bench" / "results",
                    ignore=shutil.ignore_patterns("*.json", "*.jsonl"))
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    page = copy / "docs" / "runs.md"
    page.write_text(page.read_text() + "\nSee [the flags](cli.md#no-such-heading).\n")
    p = _build(copy, tmp_path / "site")
    assert p.returncode != 0
    assert "no-such-heading" in p.stderr and "anchor" in p.stderr
