"""Task suites: the built-in problems, KernelBench-format directories, the HF dataset.

Covers: turning a suite spec (``builtin``, ``kernelbench:DIR``, ``hf:NAME_OR_PATH``)
into ``Task`` records, and finding the suite's own reference solutions. Does not cover:
running problems (see ``davinci_kernel.evaluate``). Third-party problem files are read
from where the user keeps them; nothing from them is copied into this package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Optional

from ..errors import UsageError, read_text_file
from ..pysource import parse as parse_source
from ..records import Task

BUILTIN_DIR = Path(__file__).parent / "builtin"
REFERENCE_DIR = Path(__file__).parent / "reference"

_FILE_RE = re.compile(r"^(\d+)_(.+)\.py$")
_LEVEL_RE = re.compile(r"^level(\d+)$")


class SuiteError(UsageError, ValueError):
    """The suite spec or its files are unusable; the message says why."""


def _op_type(source: str) -> str:
    """A coarse category from a module docstring line ``op_type: <name>`` if present."""
    m = re.search(r"^\s*op_type:\s*([\w/-]+)", source, re.M)
    return m.group(1) if m else ""


def load_task_file(path: str | Path, suite: str = "file", root: Optional[Path] = None, strict: bool = True) -> Task:
    """One problem file → Task. The level comes from a ``levelN`` parent folder (else 0).
    ``strict=False`` (a suite's files): bytes that are not UTF-8 read as U+FFFD, so the broken
    problem fails its own evaluation (stage ``problem``) instead of ending a suite run."""
    p = Path(path)
    try:
        source = read_text_file(p, "problem file")
    except UsageError as e:
        if strict or not p.is_file():
            raise SuiteError(str(e)) from None
        source = p.read_bytes().decode("utf-8", errors="replace")
    level = 0
    m = _LEVEL_RE.match(p.parent.name)
    if m:
        level = int(m.group(1))
    fm = _FILE_RE.match(p.name)
    pid = int(fm.group(1)) if fm else 0
    if root is not None:
        name = p.relative_to(root).with_suffix("").as_posix()
    else:
        name = (f"level{level}/" if level else "") + p.stem
    return Task(name=name, level=level, problem_id=pid, source=source, suite=suite,
                path=str(p), op_type=_op_type(source))


def check_problem_source(source: str) -> Optional[str]:
    """None if the text looks like a KernelBench problem, else what is missing."""
    try:
        tree = parse_source(source)
    except SyntaxError as e:
        return f"syntax error line {e.lineno}: {e.msg}"
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
    return f"missing {', '.join(missing)}" if missing else None


def load_dir(root: str | Path, suite: str, level: Optional[int] = None, strict: bool = True) -> list[Task]:
    """Every ``levelN/<id>_<Name>.py`` under ``root`` (superseded ``*_OLD.py`` versions and
    files not named ``<id>_<Name>.py`` skipped), sorted by level then id. ``strict=False``: a
    problem file that is not UTF-8 is loaded anyway (see ``load_task_file``), for suite runs."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise SuiteError(f"suite directory not found: {root}")
    # Accept a KernelBench checkout root as well as its KernelBench/ data folder.
    if not any(_LEVEL_RE.match(d.name) for d in root.iterdir() if d.is_dir()):
        inner = root / "KernelBench"
        if inner.is_dir():
            root = inner
        else:
            raise SuiteError(f"{root}: no levelN/ folders found (expected levelN/<id>_<Name>.py)")
    tasks = []
    for d in sorted(root.iterdir()):
        m = _LEVEL_RE.match(d.name)
        if not (d.is_dir() and m):
            continue
        if level is not None and int(m.group(1)) != level:
            continue
        for f in d.glob("*.py"):
            # KernelBench keeps a problem's pre-fix version beside it as <id>_<Name>_OLD.py
            if _FILE_RE.match(f.name) and not f.stem.endswith("_OLD"):
                tasks.append(load_task_file(f, suite=suite, root=root, strict=strict))
    tasks.sort(key=lambda t: (t.level, t.problem_id, t.name))
    return tasks


def load_hf(name_or_path: str, level: Optional[int] = None) -> list[Task]:
    """The KernelBench dataset on the Hugging Face hub or saved with ``save_to_disk``.

    Rows need ``code``, ``level``, ``problem_id`` and ``name``; splits are levels."""
    try:
        import datasets
    except ImportError:
        raise SuiteError("the hf: suite needs the 'datasets' package: pip install datasets") from None
    p = Path(name_or_path).expanduser()
    try:
        ds = datasets.load_from_disk(str(p)) if p.exists() else datasets.load_dataset(name_or_path)
    except Exception as e:  # noqa: BLE001 - any loader failure is a bad suite spec
        raise SuiteError(f"cannot load dataset '{name_or_path}': {str(e).splitlines()[0]}") from None
    splits = ds.values() if isinstance(ds, datasets.DatasetDict) else [ds]
    tasks = []
    for split in splits:
        for row in split:
            lvl = int(row.get("level", 0) or 0)
            if level is not None and lvl != level:
                continue
            pid = int(row.get("problem_id", 0) or 0)
            title = str(row.get("name") or f"{pid}_problem").removesuffix(".py")
            tasks.append(Task(name=f"level{lvl}/{title}", level=lvl, problem_id=pid,
                              source=row["code"], suite=f"hf:{name_or_path}",
                              op_type=_op_type(row["code"])))
    tasks.sort(key=lambda t: (t.level, t.problem_id, t.name))
    return tasks


def load_suite(spec: str = "builtin", level: Optional[int] = None, strict: bool = True) -> list[Task]:
    """``builtin`` | ``kernelbench:DIR`` | ``hf:NAME_OR_PATH`` | a plain directory.

    A ``level`` the suite has no task at is a SuiteError naming the levels it has. ``strict=False``
    (``bench``, ``run``): a problem file that is not text is a task that fails its evaluation
    (stage ``problem``), not the end of the run."""
    tasks = _load_suite(spec, level, strict)
    if level is not None and not tasks:
        have = sorted({t.level for t in _load_suite(spec, None)})
        has = ("levels " + ", ".join(map(str, have))) if have else "no tasks at all"
        raise SuiteError(f"--level {level}: suite {spec} has no tasks at that level (it has {has})")
    return tasks


def _load_suite(spec: str, level: Optional[int], strict: bool = True) -> list[Task]:
    if spec == "builtin":
        return load_dir(BUILTIN_DIR, suite="builtin", level=level)
    if spec.startswith("kernelbench:"):
        return load_dir(spec.split(":", 1)[1], suite=spec, level=level, strict=strict)
    if spec.startswith("hf:"):
        return load_hf(spec.split(":", 1)[1], level=level)
    if Path(spec).expanduser().is_dir():
        return load_dir(spec, suite=f"kernelbench:{spec}", level=level, strict=strict)
    raise SuiteError(f"unknown suite '{spec}': use builtin, kernelbench:DIR or hf:NAME")


def suite_id(spec: str) -> str:
    """One spelling per suite, as run.json records it and as runs are matched by: ``builtin``;
    ``kernelbench:`` and the folder's absolute path for a KernelBench folder however it was
    named (relative, ``~``, a trailing ``/``, or a plain folder without the prefix); ``hf:``
    and the absolute path of a dataset saved to disk, or the hub name as given. A relative
    path is taken from the current folder."""
    def folder(d: str) -> str:
        return str(Path(d).expanduser().resolve())

    if spec.startswith("kernelbench:"):
        return "kernelbench:" + folder(spec.split(":", 1)[1])
    if spec.startswith("hf:"):
        name = spec[3:]
        return "hf:" + (folder(name) if Path(name).expanduser().is_dir() else name)
    if spec != "builtin" and Path(spec).expanduser().is_dir():
        return "kernelbench:" + folder(spec)
    return spec


def reference_dir(spec: str) -> Path:
    """Where a suite's own solutions live (only the built-in suite ships them)."""
    if spec != "builtin":
        raise SuiteError("only the builtin suite ships reference solutions")
    return REFERENCE_DIR


def candidate_path(candidates: str | Path, task: Task) -> Path:
    """``DIR/levelN/<id>_<Name>.py`` for a task (DIR mirrors the suite's layout)."""
    return Path(candidates) / f"{task.name}.py"
