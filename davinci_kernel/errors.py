"""Errors that mean "the user asked for something we cannot do" (exit code 2), the
interrupt that a command reports after saving what it could (exit code 130), a command
whose every model call failed (exit code 3), and the
small checks of user-given paths that every command shares.

Everything else that escapes a command is our bug (exit code 1). Model-written code
never raises: its failures are data in ``EvalResult``.
"""

from __future__ import annotations

import os
from pathlib import Path


class UsageError(Exception):
    """Bad input: a missing file, a bad flag or value. The message is one line and says the fix."""


class Interrupted(Exception):
    """Ctrl-C, caught by a command after it saved what it could; the message says what was saved
    (``cli.main`` prints it as one line and exits 130)."""


class AllCallsFailed(Exception):
    """Every model call of a command failed (a server that answers each call with HTTP 400, say):
    the message says how many and the first reason (``cli.main`` exits 3)."""


EXIT_ALL_CALLS_FAILED = 3


def read_text_file(path: str | Path, what: str = "file") -> str:
    """A user-given text file, or UsageError saying what is wrong with it (missing, a folder,
    unreadable, not UTF-8)."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise UsageError(f"{what} {p} is a directory, not a file")
    if not p.exists():
        raise UsageError(f"{what} not found: {p}")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{what} {p} is not UTF-8 text (byte {e.start}: {e.reason})") from None
    except OSError as e:
        raise UsageError(f"{what} {p} cannot be read: {e.strerror or e}") from None


def check_out_dir(path: str | Path, flag: str = "--out") -> Path:
    """An output folder a command may create (missing parent folders too): refused when it is
    ``-`` (a folder is never standard output), a symbolic link to nothing, or when it or one of
    its parents is an existing file."""
    if str(path) == "-":
        raise UsageError(f"{flag} -: this command writes a folder, and a folder cannot be standard output; "
                         f"give a folder path")
    p = Path(path).expanduser()
    for q in (p, *p.parents):
        if q.is_symlink() and not q.exists():
            raise UsageError(f"{flag} {p}: {q} is a symbolic link to {os.readlink(q)}, which does not exist; "
                             f"create its target or choose another {flag}")
        if q.exists():
            if not q.is_dir():
                where = f"{p} is a file" if q == p else f"{p}: {q} is a file"
                raise UsageError(f"{flag} {where}, not a folder; choose another {flag}")
            break
    return p


def check_out_file(path: str | Path, flag: str = "output file") -> Path:
    """An output file a command may create (missing parent folders too): refused when it is a
    folder or a parent is an existing file. ``-`` is standard output (returned as it is; the
    caller writes there)."""
    if str(path) == "-":
        return Path("-")
    p = Path(path).expanduser()
    if p.is_dir():
        raise UsageError(f"{flag} {p} is a directory, not a file")
    check_out_dir(p.parent, flag)
    return p


def check_utf8(path: str | Path, what: str = "file") -> None:
    """UsageError unless ``path`` decodes as UTF-8 (read in chunks; large files are fine)."""
    import codecs

    p = Path(path).expanduser()
    dec = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    try:
        with open(p, "rb") as fh:
            while True:
                chunk = fh.read(1 << 20)
                try:
                    dec.decode(chunk, final=not chunk)
                except UnicodeDecodeError as e:
                    raise UsageError(f"{what} {p} is not UTF-8 text (byte {offset + e.start}: {e.reason})") from None
                if not chunk:
                    return
                offset += len(chunk)
    except OSError as e:
        raise UsageError(f"{what} {p} cannot be read: {e.strerror or e}") from None
