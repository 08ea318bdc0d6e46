"""The reference cache: entries built from the reference process's files, mapped from a
folder only the harness can open; the oldest entry leaves when the cache is full."""

from __future__ import annotations

import os
import stat

import torch

from davinci_kernel.evaluate.harness.refcache import ReferenceCache


def _result(home: str, trials: int, with_pref: bool) -> dict:
    leaves = {}
    for i in range(trials):
        torch.full((3,), float(i + 1)).numpy().tofile(os.path.join(home, f"{i}.bin"))
        leaves[f"ref{i}"] = [{"kind": "tensor", "dtype": "float32", "shape": [3], "file": f"{i}.bin"}]
    out = {"leaves": leaves, "ref_work": 12.0}
    if with_pref:
        torch.full((5,), 9.0).numpy().tofile(os.path.join(home, "p.bin"))
        leaves["pref"] = [{"kind": "tensor", "dtype": "float32", "shape": [5], "file": "p.bin"}]
        out["perturb_used"] = {"N": 5}
    return out


def test_entries_are_private_mapped_and_evicted(tmp_path):
    cache = ReferenceCache(str(tmp_path / "refs"), max_entries=2)
    assert stat.S_IMODE(os.stat(cache.root).st_mode) == 0o700
    homes = []
    for k in range(3):
        home = cache.new_home()
        homes.append(home)
        entry = cache.build(home, _result(home, 2, with_pref=k == 0), 2)
        cache.put(("task", k), entry)
        if k == 0:
            first = entry
    assert [float(r[0][0]) for r in first["refs"]] == [1.0, 2.0]
    assert first["perturb_used"] == {"N": 5} and float(first["pref"][0][0]) == 9.0
    assert cache.get(("task", 0)) is None and cache.get(("task", 2)) is not None  # the oldest left
    assert not os.path.exists(homes[0])  # its files are gone ...
    assert float(first["refs"][1][0][2]) == 2.0  # ... but tensors handed out stay valid (mapped)
