"""The Triton cache stores: only real files a worker owns leave it, and only for the same
source; the trusted seed reaches every new worker."""

from __future__ import annotations

import os

import pytest

from davinci_kernel.evaluate.harness import kernelcache
from davinci_kernel.evaluate.harness.kernelcache import KernelCache, copy_checked, source_key


def _cache(root, files: dict) -> str:
    for rel, data in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as fh:
            fh.write(data)
    return root


def test_a_workers_cache_is_copied_out_and_given_to_the_same_source_only(tmp_path):
    store = KernelCache(str(tmp_path / "store"))
    built = _cache(str(tmp_path / "w1"), {"AAA/k.cubin": b"\x7fELF", "AAA/k.json": b"{}", "BBB/launcher.so": b"so"})
    store.keep(source_key("src one"), built, uid=os.getuid())
    same, other = str(tmp_path / "w2"), str(tmp_path / "w3")
    os.makedirs(same)
    os.makedirs(other)
    store.give(source_key("src one"), same, uid=None)
    store.give(source_key("src two"), other, uid=None)
    assert sorted(os.listdir(same)) == ["AAA", "BBB"]
    assert open(os.path.join(same, "AAA", "k.cubin"), "rb").read() == b"\x7fELF"
    assert os.listdir(other) == []


def test_links_foreign_files_and_deep_paths_are_not_copied(tmp_path):
    secret = tmp_path / "harness_secret.bin"
    secret.write_bytes(b"reference outputs")
    w = _cache(str(tmp_path / "w"), {"AAA/ok.json": b"{}", "AAA/deep/x.bin": b"x"})
    os.symlink(secret, os.path.join(w, "AAA", "link.bin"))  # a symlink to a harness file
    os.link(secret, os.path.join(w, "AAA", "hard.bin"))  # a second name for it
    os.symlink(str(tmp_path), os.path.join(w, "DIRLINK"))  # a folder symlink
    os.mkfifo(os.path.join(w, "AAA", "fifo"))  # would block a plain copy
    out = str(tmp_path / "out")
    copy_checked(w, out, owner=os.getuid())
    assert sorted(os.listdir(out)) == ["AAA"]
    assert sorted(os.listdir(os.path.join(out, "AAA"))) == ["ok.json"]


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make a file of another uid")
def test_files_of_another_uid_are_not_copied(tmp_path):
    w = _cache(str(tmp_path / "w"), {"AAA/mine.json": b"{}", "AAA/theirs.json": b"{}"})
    os.chown(os.path.join(w, "AAA"), 61999, 61999)
    os.chown(os.path.join(w, "AAA", "mine.json"), 61999, 61999)
    out = str(tmp_path / "out")
    copy_checked(w, out, owner=61999)
    assert os.listdir(os.path.join(out, "AAA")) == ["mine.json"]


def test_size_limits_hold(tmp_path, monkeypatch):
    monkeypatch.setattr(kernelcache, "MAX_TOTAL", 10)
    w = _cache(str(tmp_path / "w"), {"A/a": b"123456", "A/b": b"123456", "A/c": b"1234"})
    assert copy_checked(w, str(tmp_path / "out"), owner=None) == 10
    assert sorted(os.listdir(tmp_path / "out" / "A")) == ["a", "c"]


def test_the_seed_is_taken_once_and_reaches_new_workers(tmp_path):
    store = KernelCache(str(tmp_path / "store"))
    store.seed(str(tmp_path / "before"), None)  # no seed yet: nothing happens
    first = _cache(str(tmp_path / "ref1"), {"FLUSH/flush.cubin": b"1"})
    second = _cache(str(tmp_path / "ref2"), {"OTHER/x.cubin": b"2"})
    store.set_seed(first)
    store.set_seed(second)
    w = str(tmp_path / "w")
    os.makedirs(w)
    store.seed(w, None)
    assert os.listdir(w) == ["FLUSH"]


def test_the_oldest_sources_are_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(kernelcache, "MAX_SOURCES", 2)
    store = KernelCache(str(tmp_path / "store"))
    for i in range(3):
        store.keep(f"k{i}", _cache(str(tmp_path / f"w{i}"), {"A/f": b"x"}), uid=None)
    assert list(store._sources) == ["k1", "k2"]
    assert not os.path.exists(tmp_path / "store" / "k0")


def test_what_the_seed_holds_is_not_kept_again_per_source(tmp_path):
    store = KernelCache(str(tmp_path / "store"))
    store.set_seed(_cache(str(tmp_path / "ref"), {"FLUSH/flush.cubin": b"1"}))
    w = _cache(str(tmp_path / "w"), {"FLUSH/flush.cubin": b"1", "CAND/k.cubin": b"2"})
    store.keep("k", w, uid=None)
    assert os.listdir(tmp_path / "store" / "k") == ["CAND"]
