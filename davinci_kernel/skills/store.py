"""The skill library on SQLite: versions per training step, usage, JSONL exchange.

Covers: the schema (one row per skill version, with the step that added it and
the step that removed it, so the library as of any step is a query); usage
statistics (times selected, times the episode improved with the skill); snapshot
markers per step and rollback to a step; import/export of the exchange format
(one JSON object per line: name, description, scope, tags, content,
verify_speedup); ``open_store`` that seeds a new, empty library. A path that holds
anything but an SQLite skill library is refused (``UsageError``), never overwritten;
a new library's missing parent folders are created.

Concurrency: the database runs in WAL mode, so rollout workers read while one
writer writes; every write is one transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``),
so a crash loses only the write in flight, never what was committed before.
Usage counters are statistics, not versioned, and survive a rollback.

Does not cover: deciding what may enter the library (``admit`` does that and is
the only writer during training) or searching it (``bm25``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

from ..errors import UsageError
from ..files import jsonl_text, write_atomic
from ..records import Skill
from .schema import check_structure, skill_from_dict

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS skills (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    scope TEXT NOT NULL,
    tags TEXT NOT NULL,
    content TEXT NOT NULL,
    verify_speedup REAL,
    source_task TEXT,
    gpu TEXT,
    added_step INTEGER NOT NULL,
    removed_step INTEGER,
    created_at REAL NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS skills_live_name ON skills(name) WHERE removed_step IS NULL;
CREATE INDEX IF NOT EXISTS skills_steps ON skills(added_step, removed_step);
CREATE TABLE IF NOT EXISTS usage (
    name TEXT PRIMARY KEY,
    times_selected INTEGER NOT NULL DEFAULT 0,
    times_improved INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS snapshots (
    step INTEGER PRIMARY KEY,
    n_skills INTEGER NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_COLS = ("s.name, s.description, s.scope, s.tags, s.content, s.verify_speedup, s.source_task, "
         "s.gpu, s.added_step, COALESCE(u.times_selected, 0), COALESCE(u.times_improved, 0)")


class SkillExistsError(UsageError, ValueError):
    """A skill of that name is already in the library."""


class UnknownSkillError(UsageError, KeyError):
    """No skill of that name in the library (as of the step asked for)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


_SQLITE_MAGIC = b"SQLite format 3\x00"


def check_library_path(path: Path) -> None:
    """A library path must be an SQLite file, or not exist yet (it is then created, with
    missing parent folders): anything else is refused, never overwritten."""
    if path.is_dir():
        raise UsageError(f"--db {path} is a directory; give the path of a .db file")
    for q in path.parents:
        if q.exists():
            if not q.is_dir():
                raise UsageError(f"--db {path}: {q} is a file, not a folder")
            break
    if path.is_file() and path.stat().st_size > 0:
        try:
            with open(path, "rb") as fh:
                head = fh.read(len(_SQLITE_MAGIC))
        except OSError as e:
            raise UsageError(f"--db {path} cannot be read: {e.strerror or e}") from None
        if head != _SQLITE_MAGIC:
            raise UsageError(f"--db {path} is not an SQLite skill library (refusing to overwrite it); "
                             "give a .db file made by dvk, or a new path")


def _row_to_skill(row) -> Skill:
    return Skill(name=row[0], description=row[1], scope=row[2], tags=json.loads(row[3]),
                 content=row[4], verify_speedup=row[5], source_task=row[6], gpu=row[7],
                 step=row[8], times_selected=row[9], times_improved=row[10])


class SkillStore:
    """One SQLite library. Open one per process (or thread group); it is safe to
    share between threads of one process and to open from several processes."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).expanduser()
        if str(path) != ":memory:":
            check_library_path(self.path)
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        try:
            self._conn = sqlite3.connect(str(self.path) if str(path) != ":memory:" else ":memory:",
                                         timeout=30.0, isolation_level=None, check_same_thread=False)
            if str(path) != ":memory:":
                tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                if tables and not tables & {"skills", "meta"}:
                    self._conn.close()
                    raise UsageError(f"{self.path} is an SQLite database but not a skill library "
                                     f"(tables: {', '.join(sorted(tables)[:5])}); give another --db")
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA busy_timeout=30000")
            with self._write():
                for stmt in filter(str.strip, _SCHEMA.split(";")):
                    self._conn.execute(stmt)
                self._conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                                   (str(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as e:
            raise UsageError(f"{self.path}: not a usable skill library ({e})") from None

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: all of it is committed, or none of it."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _query(self, sql: str, args: tuple = ()) -> list:
        with self._lock:
            return self._conn.execute(sql, args).fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SkillStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def _visible(step: Optional[int]) -> tuple[str, tuple]:
        if step is None:
            return "s.removed_step IS NULL", ()
        return "s.added_step <= ? AND (s.removed_step IS NULL OR s.removed_step > ?)", (step, step)

    # ------------------------------------------------------------------ reading
    def current_step(self) -> int:
        """The latest step any version or snapshot mentions (0 for a fresh library)."""
        row = self._query("SELECT MAX(m) FROM (SELECT MAX(added_step) AS m FROM skills "
                          "UNION ALL SELECT MAX(removed_step) FROM skills "
                          "UNION ALL SELECT MAX(step) FROM snapshots)")
        return int(row[0][0] or 0)

    def all(self, step: Optional[int] = None) -> list[Skill]:
        """The library as of ``step`` (the end of that step), or as it is now."""
        where, args = self._visible(step)
        rows = self._query(f"SELECT {_COLS} FROM skills s LEFT JOIN usage u ON u.name = s.name "
                           f"WHERE {where} ORDER BY s.id", args)
        return [_row_to_skill(r) for r in rows]

    def get(self, name: str, step: Optional[int] = None) -> Skill:
        where, args = self._visible(step)
        rows = self._query(f"SELECT {_COLS} FROM skills s LEFT JOIN usage u ON u.name = s.name "
                           f"WHERE s.name = ? AND {where}", (name, *args))
        if not rows:
            when = "" if step is None else f" as of step {step}"
            raise UnknownSkillError(f"no skill named '{name}' in {self.path}{when} "
                                    f"(see `dvk skills list`)")
        return _row_to_skill(rows[0])

    def __contains__(self, name: str) -> bool:
        return bool(self._query("SELECT 1 FROM skills WHERE name = ? AND removed_step IS NULL", (name,)))

    def __len__(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM skills WHERE removed_step IS NULL")[0][0])

    def names(self, step: Optional[int] = None) -> list[str]:
        return [s.name for s in self.all(step)]

    def snapshots(self) -> list[tuple[int, int]]:
        """``[(step, n_skills), ...]`` in step order."""
        return [(int(a), int(b)) for a, b in self._query("SELECT step, n_skills FROM snapshots ORDER BY step")]

    def meta(self, key: str) -> Optional[str]:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    # ------------------------------------------------------------------ writing
    def _insert(self, conn: sqlite3.Connection, skill: Skill, step: int) -> None:
        conn.execute(
            "INSERT INTO skills(name, description, scope, tags, content, verify_speedup, source_task, "
            "gpu, added_step, created_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (skill.name, skill.description, skill.scope, json.dumps(list(skill.tags)), skill.content,
             skill.verify_speedup, skill.source_task, skill.gpu, step, time.time()))

    def add(self, skill: Skill, step: Optional[int] = None) -> Skill:
        """Add a well-formed skill at ``step`` (default: the current step)."""
        reason = check_structure(skill)
        if reason:
            raise UsageError(f"skill {skill.name!r} rejected: {reason}")
        with self._write() as conn:
            step = self.current_step() if step is None else int(step)
            if conn.execute("SELECT 1 FROM skills WHERE name = ? AND removed_step IS NULL",
                            (skill.name,)).fetchone():
                raise SkillExistsError(f"a skill named '{skill.name}' is already in {self.path}")
            self._insert(conn, skill, step)
        return self.get(skill.name)

    def replace(self, name: str, skill: Skill, step: Optional[int] = None) -> Skill:
        """Retire ``name`` and add ``skill`` in its place, in one transaction."""
        reason = check_structure(skill)
        if reason:
            raise UsageError(f"skill {skill.name!r} rejected: {reason}")
        with self._write() as conn:
            step = self.current_step() if step is None else int(step)
            cur = conn.execute("UPDATE skills SET removed_step = ? WHERE name = ? AND removed_step IS NULL",
                               (step, name))
            if cur.rowcount == 0:
                raise UnknownSkillError(f"no skill named '{name}' to replace")
            if skill.name != name and conn.execute(
                    "SELECT 1 FROM skills WHERE name = ? AND removed_step IS NULL", (skill.name,)).fetchone():
                raise SkillExistsError(f"a skill named '{skill.name}' is already in {self.path}")
            self._insert(conn, skill, step)
        return self.get(skill.name)

    def apply(self, adds: Iterable[Skill] = (), replaces: Iterable[tuple[str, Skill]] = (),
              step: Optional[int] = None) -> list[Skill]:
        """Several additions and replacements in one transaction (all or nothing)."""
        adds, replaces = list(adds), list(replaces)
        for skill in adds + [s for _, s in replaces]:
            reason = check_structure(skill)
            if reason:
                raise UsageError(f"skill {skill.name!r} rejected: {reason}")
        with self._write() as conn:
            step = self.current_step() if step is None else int(step)
            for old, _ in replaces:
                conn.execute("UPDATE skills SET removed_step = ? WHERE name = ? AND removed_step IS NULL",
                             (step, old))
            for skill in adds + [s for _, s in replaces]:
                if conn.execute("SELECT 1 FROM skills WHERE name = ? AND removed_step IS NULL",
                                (skill.name,)).fetchone():
                    raise SkillExistsError(f"a skill named '{skill.name}' is already in {self.path}")
                self._insert(conn, skill, step)
        return [self.get(s.name) for s in adds + [s for _, s in replaces]]

    def remove(self, name: str, step: Optional[int] = None) -> None:
        """Retire a skill from ``step`` on (earlier steps still see it)."""
        with self._write() as conn:
            step = self.current_step() if step is None else int(step)
            cur = conn.execute("UPDATE skills SET removed_step = ? WHERE name = ? AND removed_step IS NULL",
                               (step, name))
            if cur.rowcount == 0:
                raise UnknownSkillError(f"no skill named '{name}' in {self.path}")

    def snapshot(self, step: int) -> int:
        """Mark the library as complete for ``step``; returns its size."""
        with self._write() as conn:
            n = len(self.all(step))
            conn.execute("INSERT OR REPLACE INTO snapshots(step, n_skills, created_at) VALUES (?,?,?)",
                         (int(step), n, time.time()))
        return n

    def rollback(self, step: int) -> int:
        """Forget everything written after ``step``; returns the library size then."""
        with self._write() as conn:
            conn.execute("DELETE FROM skills WHERE added_step > ?", (int(step),))
            conn.execute("UPDATE skills SET removed_step = NULL WHERE removed_step > ?", (int(step),))
            conn.execute("DELETE FROM snapshots WHERE step > ?", (int(step),))
        return len(self)

    def record_usage(self, names: Iterable[str], improved: bool) -> None:
        """Count one selection of each skill, and one improvement when ``improved``."""
        names = sorted(set(names))
        if not names:
            return
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO usage(name, times_selected, times_improved) VALUES (?, 1, ?) "
                "ON CONFLICT(name) DO UPDATE SET times_selected = times_selected + 1, "
                "times_improved = times_improved + excluded.times_improved",
                [(n, int(bool(improved))) for n in names])

    def set_meta(self, key: str, value: str) -> None:
        with self._write() as conn:
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    # ------------------------------------------------------------------ exchange format
    def import_jsonl(self, path: str | os.PathLike, step: Optional[int] = None,
                     replace: bool = False) -> tuple[int, list[tuple[int, str]]]:
        """Import one skill per line; bad lines are skipped and reported.

        Returns ``(n_imported, [(line_no, message), ...])``. Every good line is
        written in one transaction. A name already in the library is an error
        for that line unless ``replace``."""
        p = Path(path).expanduser()
        if not p.is_file():
            raise UsageError(f"file not found: {p}")
        good: list[Skill] = []
        errors: list[tuple[int, str]] = []
        seen: set[str] = set()
        with open(p, encoding="utf-8", errors="replace") as fh:
            for no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    skill = skill_from_dict(json.loads(line))
                except json.JSONDecodeError as e:
                    errors.append((no, f"not valid JSON ({e.msg} at column {e.colno})"))
                    continue
                except ValueError as e:
                    errors.append((no, str(e)))
                    continue
                if skill.name in seen:
                    errors.append((no, f"duplicate name '{skill.name}' in this file (first kept)"))
                    continue
                seen.add(skill.name)
                good.append(skill)
        n = 0
        with self._write() as conn:
            at = self.current_step() if step is None else int(step)
            for skill in good:
                live = conn.execute("SELECT 1 FROM skills WHERE name = ? AND removed_step IS NULL",
                                    (skill.name,)).fetchone()
                if live and not replace:
                    errors.append((self._line_of(p, skill.name), f"'{skill.name}' is already in the library (skipped)"))
                    continue
                if live:
                    conn.execute("UPDATE skills SET removed_step = ? WHERE name = ? AND removed_step IS NULL",
                                 (at, skill.name))
                self._insert(conn, skill, at)
                n += 1
        errors.sort()
        return n, errors

    @staticmethod
    def _line_of(path: Path, name: str) -> int:
        needle = json.dumps(name)
        with open(path, encoding="utf-8", errors="replace") as fh:
            for no, line in enumerate(fh, 1):
                if needle in line:
                    return no
        return 0

    def export_jsonl(self, path: str | os.PathLike, step: Optional[int] = None) -> int:
        """Write the library (as of ``step``) in the exchange format; returns the count.
        The file is written next to its destination and renamed, so readers never see half."""
        p = Path(path).expanduser()
        p.parent.mkdir(parents=True, exist_ok=True)
        skills = self.all(step)
        write_atomic(p, jsonl_text((s.export_dict() for s in skills), ensure_ascii=False))
        return len(skills)


def seed_path() -> Path:
    """The bundled seed library (package data)."""
    return Path(__file__).parent / "seed" / "seed_skills.jsonl"


def open_store(cfg) -> SkillStore:
    """Open ``cfg.db``; a new, empty library gets the bundled seed skills at step 0
    when ``cfg.seed_library``. Decided once, when the library is first opened: a library
    emptied on purpose, or started empty (``seed_library`` false, ``--no-seed``), stays empty."""
    store = SkillStore(cfg.db)
    if len(store) == 0 and store.meta("seeded") is None:
        if getattr(cfg, "seed_library", True):
            src = seed_path()
            if src.is_file():
                store.import_jsonl(src, step=0)
            store.set_meta("seeded", src.name)
        else:
            store.set_meta("seeded", "")  # started empty on purpose
    return store
