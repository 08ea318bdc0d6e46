"""SkillStore: versions per step, rollback, usage, JSONL exchange, crash safety, seeding."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from davinci_kernel.config import SkillsConfig
from davinci_kernel.errors import UsageError
from davinci_kernel.records import Skill
from davinci_kernel.skills.store import SkillExistsError, SkillStore, UnknownSkillError, open_store, seed_path

CONTENT = "## Motivation\nwhen {n}\n## Key Idea\nidea {n}\n## Example\n```python\nx = {n}\n```\n"


def mk(name, **kw):
    return Skill(name=name, description=f"about {name}", tags=["t1", name], content=CONTENT.format(n=name), **kw)


@pytest.fixture
def store(tmp_path):
    s = SkillStore(tmp_path / "lib.db")
    yield s
    s.close()


def test_add_get_and_wal(store):
    store.add(mk("alpha"), step=0)
    got = store.get("alpha")
    assert got.name == "alpha" and got.tags == ["t1", "alpha"] and got.step == 0
    assert len(store) == 1 and "alpha" in store
    mode = store._conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode.lower() == "wal"
    with pytest.raises(SkillExistsError):
        store.add(mk("alpha"))
    with pytest.raises(UnknownSkillError, match="no skill named 'nope'"):
        store.get("nope")


def test_rejects_malformed_skill(store):
    bad = Skill(name="no_sections", description="d", content="just text")
    with pytest.raises(UsageError, match="## Motivation"):
        store.add(bad)
    assert len(store) == 0


def test_steps_snapshot_and_rollback(store):
    store.add(mk("a"), step=0)
    store.add(mk("b"), step=1)
    store.snapshot(1)
    store.replace("a", replace(mk("a"), description="better a"), step=2)
    store.add(mk("c"), step=2)
    assert store.names(0) == ["a"]
    assert sorted(store.names(1)) == ["a", "b"]
    assert store.get("a", step=1).description == "about a"
    assert store.get("a").description == "better a"
    assert sorted(store.names()) == ["a", "b", "c"]
    assert store.rollback(1) == 2
    assert sorted(store.names()) == ["a", "b"] and store.get("a").description == "about a"
    assert store.snapshots() == [(1, 2)]
    store.remove("b", step=3)
    assert store.names() == ["a"] and sorted(store.names(2)) == ["a", "b"]


def test_usage_counts(store):
    store.add(mk("a"), step=0)
    store.add(mk("b"), step=0)
    store.record_usage(["a", "b"], improved=True)
    store.record_usage(["a"], improved=False)
    a, b = store.get("a"), store.get("b")
    assert (a.times_selected, a.times_improved) == (2, 1)
    assert (b.times_selected, b.times_improved) == (1, 1)


def test_import_reports_bad_lines_and_keeps_good(store, tmp_path):
    p = tmp_path / "in.jsonl"
    lines = [json.dumps(mk("good_one").export_dict()), "{not json", "",
             json.dumps({"name": "BadName", "description": "x", "content": CONTENT.format(n=1)}),
             json.dumps({"name": "no_sections", "description": "x", "content": "text"}),
             json.dumps(mk("good_two").export_dict()), json.dumps(mk("good_one").export_dict())]
    p.write_text("\n".join(lines) + "\n")
    n, errors = store.import_jsonl(p)
    assert n == 2 and sorted(store.names()) == ["good_one", "good_two"]
    assert [ln for ln, _ in errors] == [2, 4, 5, 7]
    assert "not valid JSON" in errors[0][1] and "snake_case" in errors[1][1]
    assert "## Motivation" in errors[2][1] and "duplicate" in errors[3][1]
    n2, errors2 = store.import_jsonl(p)
    assert n2 == 0 and any("already in the library" in m for _, m in errors2)


def test_export_import_roundtrip(store, tmp_path):
    store.add(mk("a", verify_speedup=1.5), step=0)
    store.add(mk("b"), step=1)
    out = tmp_path / "out.jsonl"
    assert store.export_jsonl(out) == 2
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    assert set(rows[0]) == {"name", "description", "scope", "tags", "content", "verify_speedup"}
    assert rows[0]["verify_speedup"] == 1.5
    other = SkillStore(tmp_path / "other.db")
    assert other.import_jsonl(out) == (2, [])
    assert other.get("a").export_dict() == store.get("a").export_dict()
    assert store.export_jsonl(tmp_path / "s0.jsonl", step=0) == 1


def test_failed_batch_writes_nothing(store):
    store.add(mk("a"), step=0)
    with pytest.raises(SkillExistsError):
        store.apply(adds=[mk("new_one"), mk("a")], step=1)
    assert store.names() == ["a"]


def test_crash_mid_write_keeps_committed(tmp_path):
    db = tmp_path / "crash.db"
    code = f"""
import os
from davinci_kernel.records import Skill
from davinci_kernel.skills.store import SkillStore
C = {CONTENT!r}
s = SkillStore({str(db)!r})
s.add(Skill(name="committed", description="d", content=C.format(n=1)), step=0)
with s._write() as conn:
    s._insert(conn, Skill(name="in_flight", description="d", content=C.format(n=2)), 1)
    os._exit(1)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 1, r.stderr
    s = SkillStore(db)
    assert s.names() == ["committed"]


def test_reader_sees_committed_while_writer_open(tmp_path):
    db = tmp_path / "shared.db"
    writer, reader = SkillStore(db), SkillStore(db)
    writer.add(mk("a"), step=0)
    with writer._write() as conn:
        writer._insert(conn, mk("b"), 0)
        assert reader.names() == ["a"]  # readers are not blocked and see only committed data
    assert sorted(reader.names()) == ["a", "b"]


def test_open_store_seeds_once(tmp_path):
    cfg = SkillsConfig(db=str(tmp_path / "seeded.db"))
    s = open_store(cfg)
    n_seed = sum(1 for l in seed_path().read_text().splitlines() if l.strip())
    assert len(s) == n_seed >= 20
    for name in s.names():
        s.remove(name)
    s.close()
    assert len(open_store(cfg)) == 0  # emptied on purpose: not re-seeded
    cfg2 = SkillsConfig(db=str(tmp_path / "empty.db"), seed_library=False)
    assert len(open_store(cfg2)) == 0
    cfg2.seed_library = True
    assert len(open_store(cfg2)) == 0  # started empty (--no-seed): the choice was made at creation
