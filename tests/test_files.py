"""Writes that never clobber: a regular file is replaced atomically, a symlink is written
through (it stays a link), a FIFO or device is written as a stream, ``-`` is stdout."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from davinci_kernel.errors import UsageError
from davinci_kernel.files import write_atomic, write_json


def test_a_regular_file_is_replaced_and_keeps_its_mode(tmp_path):
    p = tmp_path / "a.json"
    p.write_text("old")
    os.chmod(p, 0o600)
    write_atomic(p, "new")
    assert p.read_text() == "new" and stat.S_IMODE(p.stat().st_mode) == 0o600
    assert [x.name for x in tmp_path.iterdir()] == ["a.json"]  # no temporary file left


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path):
    real = tmp_path / "data" / "lib.jsonl"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    write_atomic(link, "new\n")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new\n"


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "made.json")
    write_json(link, {"a": 1})
    assert link.is_symlink() and (tmp_path / "made.json").read_text().startswith("{")


def test_a_fifo_is_a_stream_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    write_atomic(fifo, b"through the pipe")
    reader.join(timeout=10)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_dash_is_stdout(capsysbinary):
    write_atomic("-", "to stdout\n")
    assert capsysbinary.readouterr().out == b"to stdout\n"


def test_a_folder_is_refused_in_one_line(tmp_path):
    with pytest.raises(UsageError, match="is a folder"):
        write_atomic(tmp_path, "x")


def test_skills_export_to_dash_writes_only_the_library_to_stdout(tmp_path):
    from conftest import run_dvk

    db = tmp_path / "lib.db"
    p = run_dvk(["skills", "export", "-", "--db", db])
    assert p.returncode == 0, p.stderr[-500:]
    lines = p.stdout.splitlines()
    assert lines and all(ln.startswith("{") for ln in lines) and "standard output" in p.stderr
    q = run_dvk(["skills", "export", "-", "--db", db, "--json"])
    assert q.returncode == 2 and q.stdout == "" and len(q.stderr.strip().splitlines()) == 1
