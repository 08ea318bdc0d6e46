"""The files of a rollout run directory, written so an interruption loses nothing.

Covers: ``run.json`` (what the run is: model, suite, settings, tasks per level; written
atomically and checked on resume so a directory is never mixed between two different
runs), ``groups.jsonl`` (one ``TaskGroup`` per line: every model call of a task),
``results.jsonl`` (``EvalResult`` dicts with ``task``, ``level`` and ``which`` =
``last`` | ``best``, the file ``dvk report`` reads), appended line by line and flushed to
disk; ``finished()`` tells which tasks a resumed run can skip. Does not cover: what goes
in the records.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from ..errors import UsageError

RUN_FILE = "run.json"
GROUPS_FILE = "groups.jsonl"
RESULTS_FILE = "results.jsonl"
WHICH = ("last", "best")
_SAME_RUN_KEYS = ("kind", "model", "suite", "skills", "select", "turns", "problem")


class RunDir:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).expanduser()
        if self.path.exists() and not self.path.is_dir():
            raise UsageError(f"--out {self.path} is a file, not a directory")

    def file(self, name: str) -> Path:
        return self.path / name

    # ------------------------------------------------------------------ writing
    def write_atomic(self, name: str, text: str) -> Path:
        p = self.file(name)
        tmp = p.with_name(p.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
        return p

    def write_json(self, name: str, obj: Any) -> Path:
        return self.write_atomic(name, json.dumps(obj, indent=2, default=str) + "\n")

    def append(self, name: str, rows: Iterable[dict]) -> None:
        """Whole lines in one write, flushed and synced before returning."""
        data = "".join(json.dumps(r, default=str) + "\n" for r in rows)
        with open(self.file(name), "a", encoding="utf-8") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    # ------------------------------------------------------------------ resuming
    def start(self, meta: dict) -> dict:
        """Create the directory and write run.json, or check that an existing one describes
        the same run."""
        self.path.mkdir(parents=True, exist_ok=True)
        p = self.file(RUN_FILE)
        if p.is_file():
            try:
                old = json.loads(p.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                old = {}
            for key in _SAME_RUN_KEYS:
                if key in old and key in meta and old[key] != meta[key]:
                    raise UsageError(f"{self.path} holds a run with {key}={old[key]!r}, not {meta[key]!r}: "
                                     "resume it with the same options or choose another --out")
            meta = {**old, **meta, "resumed": int(old.get("resumed", 0)) + 1}
        self.write_json(RUN_FILE, meta)
        return meta

    def read_jsonl(self, name: str) -> list[dict]:
        p = self.file(name)
        if not p.is_file():
            return []
        rows = []
        with open(p, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut by an interruption: that task is redone
        return rows

    def finished(self) -> set[str]:
        """Tasks with both a ``last`` and a ``best`` result line."""
        seen: dict[str, set] = {}
        for row in self.read_jsonl(RESULTS_FILE):
            if isinstance(row, dict) and row.get("task"):
                seen.setdefault(row["task"], set()).add(row.get("which"))
        return {t for t, w in seen.items() if set(WHICH) <= w}
