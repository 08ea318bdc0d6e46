"""A run directory: the files a `dvk` run writes there and `dvk report` reads back.

The layout, one name per file (a run writes the subset its command makes):
``run.json`` (what the run is: command, model, suite, settings, tasks per level; written
atomically and checked on resume so that a directory never mixes two different runs),
``results.jsonl`` (``EvalResult`` dicts with ``task`` and ``level``; ``dvk run``/``optimize``
add ``which`` = ``last`` | ``best``, ``dvk bench`` the ``candidate`` path), ``summary.json``,
``groups.jsonl`` (one ``TaskGroup`` per line: every model call of a task), ``best.py`` and
``best.json`` (``dvk optimize``), ``skills.jsonl`` (skills a run admitted) and
``metrics.jsonl`` (one training step per line, ``dvk train``). Line files are appended line
by line and synced; ``finished()`` tells which tasks a resumed run can skip.

``claim(path)`` is how a command takes its folder: one command at a time (an exclusive
``flock`` on ``RUN_DIR/.dvk.lock``; a second command is refused in one line, exit 2); a
folder the command created is removed again when it fails or is interrupted before
saving a complete step (``only_setup``: a folder with nothing else counts as empty, and a
rerun starts there as new, whatever its run.json says); and a Ctrl-C that the command did not report itself is
reported with what the folder holds (``saved_note``).

Covers: those names, the default folder of a run (``runs/NAME``) and ``RunDir``. Does not
cover: what the records hold (``records``) or reading a run for the report (``report.rundata``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Optional

from . import files, locks, provenance
from .config import refuse_changes
from .errors import Interrupted, UsageError, check_out_dir

RUNS = Path("runs")  # where a run goes when no --out is given
RUN_FILE = "run.json"
RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"
GROUPS_FILE = "groups.jsonl"
METRICS_FILE = "metrics.jsonl"
SKILLS_FILE = "skills.jsonl"
BEST_CODE = "best.py"
BEST_RESULT = "best.json"
LOCK_FILE = ".dvk.lock"
WHICH = ("last", "best")
_SAME_RUN_KEYS = ("kind", "model", "suite", "skills", "select", "turns", "problem")


def default_dir(name: str) -> Path:
    """``runs/NAME``: a run's folder when no ``--out`` is given."""
    return RUNS / name


class RunDir:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).expanduser()
        if self.path.exists() and not self.path.is_dir():
            raise UsageError(f"--out {self.path} is a file, not a directory")

    def file(self, name: str) -> Path:
        return self.path / name

    # ------------------------------------------------------------------ writing
    def write_atomic(self, name: str, text: str) -> Path:
        return files.write_atomic(self.file(name), text)

    def write_json(self, name: str, obj: Any) -> Path:
        return files.write_json(self.file(name), obj)

    def append(self, name: str, rows: Iterable[dict]) -> None:
        """Whole lines in one write, flushed and synced before returning."""
        files.append_jsonl(self.file(name), rows)

    # ------------------------------------------------------------------ reading
    def read_jsonl(self, name: str) -> list[dict]:
        """The lines of a JSONL file that are objects ([] when it is missing); a line cut by an
        interruption is skipped (that task is redone)."""
        p = self.file(name)
        return files.read_jsonl(p) if p.is_file() else []

    def read_meta(self) -> dict:
        """run.json as a dict ({} when missing or unreadable)."""
        p = self.file(RUN_FILE)
        if not p.is_file():
            return {}
        try:
            old = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return {}
        return old if isinstance(old, dict) else {}

    # ------------------------------------------------------------------ resuming
    def start(self, meta: dict, sandbox: Optional[str] = None, allow: tuple = ()) -> dict:
        """Create the directory and write run.json, or check that an existing one describes
        the same run: the same options, and a ``config`` (the sections the command read) that
        changes no results, unless each change is in ``allow`` (``--allow-config-change``).
        Given the evaluator's ``sandbox`` (a start that will do work), it records this
        start's ``provenance`` too (``provenance.record``)."""
        self.path.mkdir(parents=True, exist_ok=True)
        old: dict = {}
        if self.file(RUN_FILE).is_file() and not only_setup(self.path):  # no complete step: a new run
            old = self.read_meta()
            for key in _SAME_RUN_KEYS:
                if key in old and key in meta and old[key] != meta[key]:
                    raise UsageError(f"{self.path} holds a run with {key}={old[key]!r}, not {meta[key]!r}: "
                                     "resume it with the same options or choose another --out")
            if isinstance(old.get("config"), dict) and isinstance(meta.get("config"), dict):
                refuse_changes(old["config"], meta["config"], tuple(allow), str(self.path))
            meta = {**old, **meta, "resumed": int(old.get("resumed", 0)) + 1}
        if sandbox is not None:
            meta = provenance.record(meta, old=old, sandbox=sandbox)
        self.write_json(RUN_FILE, meta)
        return meta

    def finished(self) -> set[str]:
        """Tasks with both a ``last`` and a ``best`` result line."""
        seen: dict[str, set] = {}
        for row in self.read_jsonl(RESULTS_FILE):
            if row.get("task"):
                seen.setdefault(row["task"], set()).add(row.get("which"))
        return {t for t, w in seen.items() if set(WHICH) <= w}


def saved_note(path: str | os.PathLike) -> str:
    """What a run folder holds, in words, for an interrupt message: tasks with result lines,
    task groups, the best candidate, admitted skills."""
    rd = RunDir(path)
    parts = []
    tasks = {r.get("task") for r in rd.read_jsonl(RESULTS_FILE) if r.get("task")}
    if tasks:
        parts.append(f"{len(tasks)} task(s) in {RESULTS_FILE}")
    groups = rd.read_jsonl(GROUPS_FILE)
    if groups:
        parts.append(f"{len(groups)} task group(s) in {GROUPS_FILE}")
    if rd.file(BEST_CODE).is_file():
        parts.append(BEST_CODE)
    skills = rd.read_jsonl(SKILLS_FILE)
    if skills:
        parts.append(f"{len(skills)} admitted skill(s) in {SKILLS_FILE}")
    if not parts:
        return f"nothing but {RUN_FILE} was saved in {rd.path}"
    return f"saved in {rd.path}: {', '.join(parts)}; rerun the same command to resume"


SETUP_FILES = (LOCK_FILE, RUN_FILE, "config.json")  # what a command writes before its first complete step


def _empty_tree(path: Path) -> bool:
    try:
        return path.is_dir() and not path.is_symlink() and all(_empty_tree(q) for q in path.iterdir())
    except OSError:
        return False


def only_setup(path: str | os.PathLike) -> bool:
    """True when the folder holds no complete step: nothing but its lock, run.json, a training
    run's config.json, empty line files and empty folders. Such a folder counts as empty: a
    command that fails in it removes it when it made it, and a rerun starts there as new."""
    try:
        items = list(Path(path).iterdir())
    except OSError:
        return False
    for p in items:
        if p.is_symlink():
            return False
        if p.is_dir():
            if not _empty_tree(p):
                return False
        elif not (p.name in SETUP_FILES or (p.suffix == ".jsonl" and p.stat().st_size == 0)):
            return False
    return True


def _remove_new(path: Path, created: list[Path]) -> bool:
    """Remove a folder this command created (and the parents it created, when empty)."""
    try:
        shutil.rmtree(path)
    except OSError:
        return False
    for q in created[1:]:
        try:
            q.rmdir()
        except OSError:
            break
    return True


@contextlib.contextmanager
def claim(path: str | os.PathLike, flag: str = "--out") -> Iterator[RunDir]:
    """The run folder ``path`` for one command: created (with missing parents) and locked
    while the block runs. Another command holding it: ``locks.Busy`` (exit 2). When the block
    fails or is interrupted and the folder is one this call created that holds nothing but
    its lock and run.json, it is removed. A bare ``KeyboardInterrupt`` becomes ``Interrupted``
    saying what the folder holds."""
    p = check_out_dir(path, flag)
    created = []  # the folders made here, deepest first
    q = p
    while not q.exists():
        created.append(q)
        q = q.parent
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{flag} {p}: cannot create it ({e.strerror or e})") from None
    with locks.hold(p / LOCK_FILE, f"{flag} {p}"):
        try:
            yield RunDir(p)
        except BaseException as e:
            removed = bool(created) and only_setup(p) and _remove_new(p, created)
            if isinstance(e, (KeyboardInterrupt, Interrupted)):
                if removed:
                    raise Interrupted(f"nothing was saved (the new folder {p} was removed)") from None
                if isinstance(e, KeyboardInterrupt):
                    raise Interrupted(saved_note(p)) from None
            raise
