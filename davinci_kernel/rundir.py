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

Covers: those names, the default folder of a run (``runs/NAME``) and ``RunDir``. Does not
cover: what the records hold (``records``) or reading a run for the report (``report.rundata``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

from . import files, provenance
from .errors import UsageError

RUNS = Path("runs")  # where a run goes when no --out is given
RUN_FILE = "run.json"
RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"
GROUPS_FILE = "groups.jsonl"
METRICS_FILE = "metrics.jsonl"
SKILLS_FILE = "skills.jsonl"
BEST_CODE = "best.py"
BEST_RESULT = "best.json"
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
    def start(self, meta: dict, sandbox: Optional[str] = None) -> dict:
        """Create the directory and write run.json, or check that an existing one describes
        the same run. Given the evaluator's ``sandbox`` (a start that will do work), it
        records this start's ``provenance`` too (``provenance.record``)."""
        self.path.mkdir(parents=True, exist_ok=True)
        old: dict = {}
        if self.file(RUN_FILE).is_file():
            old = self.read_meta()
            for key in _SAME_RUN_KEYS:
                if key in old and key in meta and old[key] != meta[key]:
                    raise UsageError(f"{self.path} holds a run with {key}={old[key]!r}, not {meta[key]!r}: "
                                     "resume it with the same options or choose another --out")
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
