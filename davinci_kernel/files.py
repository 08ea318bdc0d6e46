"""Files written so that an interruption loses nothing, JSONL read back, and the JSON
document a ``--json`` command prints.

Covers: ``write_atomic`` (for a regular file, new or ours: a temporary file beside it,
synced, then renamed over it, so a reader sees the old file or the new one, never half of
one; a symlink is written through to what it names and stays a link; a device, FIFO or
socket is a stream, written to and never replaced; ``-`` is standard output), ``write_json``,
``append_jsonl`` (whole lines in one write, flushed and synced before it returns),
``replace_jsonl_row`` (one row of a JSONL file replaced, the whole file rewritten
atomically), ``drop_cut_line`` (removes a last line that a kill cut short from an append-only file),
``iter_jsonl``/``read_jsonl`` (the JSON objects of a JSONL file, blank lines skipped, any
other line handed to ``on_bad``, which may raise, or else skipped) and ``print_json``.
Does not cover: what the files hold or where a run keeps them (``rundir``).
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Optional, Union

from .errors import UsageError

OnBad = Callable[[int, str], None]  # (line number, why) for a line that is not a JSON object


def write_atomic(path: Union[str, os.PathLike], data: Union[bytes, str]) -> Path:
    """Write ``data`` to ``path``, never over what ``path`` is: a regular file (or a new one)
    through a synced temporary file in its folder, renamed over it; a symlink's target the
    same way (the link stays a link); a device, FIFO or socket as the stream it is; ``-``
    to standard output."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if str(path) == "-":
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()
        return Path("-")
    path = Path(path)
    try:
        st = os.stat(path)  # what the path names, through any link
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path} is a folder; name a file")
    if st is not None and not stat.S_ISREG(st.st_mode):  # a stream (/dev/stdout, a FIFO): written to
        with open(path, "wb") as fh:
            fh.write(raw)
        return path
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as e:
        raise UsageError(f"cannot write in {target.parent}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode) if st is not None else 0o644)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def write_json(path: Union[str, os.PathLike], obj: Any) -> Path:
    return write_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


def jsonl_text(rows: Iterable[Any], **dumps_kwargs) -> str:
    """The JSONL text of ``rows``: one line each, every line ending with a newline."""
    return "".join(json.dumps(r, **{"default": str, **dumps_kwargs}) + "\n" for r in rows)


def append_jsonl(path: Union[str, os.PathLike], rows: Iterable[Any]) -> None:
    """Append ``rows`` as whole lines in one write, flushed and synced before returning."""
    data = jsonl_text(rows)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def replace_jsonl_row(path: Union[str, os.PathLike], key: str, row: dict) -> None:
    """Rewrite ``path`` atomically with every line whose object has ``row[key]`` at ``key``
    replaced by ``row`` (once, where the first stood; appended if none did). Other lines,
    unparsable ones included, stay as they are."""
    path = Path(path)
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    new, placed = [], False
    for line in text.splitlines(keepends=True):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and key in obj and obj[key] == row[key]:
            if not placed:
                new.append(jsonl_text([row]))
                placed = True
            continue
        new.append(line if line.endswith("\n") else line + "\n")
    if not placed:
        new.append(jsonl_text([row]))
    write_atomic(path, "".join(new))


def drop_cut_line(path: Union[str, os.PathLike]) -> None:
    """Drop a last line cut by a kill (whole lines end with a newline) from an append-only file."""
    path = Path(path)
    if not (path.is_file() and path.stat().st_size):
        return
    with open(path, "rb+") as fh:
        data = fh.read()
        if data.endswith(b"\n"):
            return
        fh.truncate(data.rfind(b"\n") + 1)
        fh.flush()
        os.fsync(fh.fileno())


def iter_jsonl(path: Union[str, os.PathLike], on_bad: Optional[OnBad] = None) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for every line of ``path`` that is a JSON object. Blank lines
    are skipped; any other line (a line cut by a kill, a list) goes to ``on_bad(n, why)``,
    which may raise, or is skipped. Undecodable bytes read as U+FFFD."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                if on_bad is not None:
                    on_bad(n, f"not JSON ({e.msg})")
                continue
            if not isinstance(obj, dict):
                if on_bad is not None:
                    on_bad(n, f"a JSON {type(obj).__name__}, not an object")
                continue
            yield n, obj


def read_jsonl(path: Union[str, os.PathLike], on_bad: Optional[OnBad] = None) -> list[dict]:
    """The JSON objects of a JSONL file, in order (see ``iter_jsonl``)."""
    return [obj for _, obj in iter_jsonl(path, on_bad)]


def print_json(obj: Any) -> None:
    """The one JSON document a ``--json`` command writes on stdout."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()
