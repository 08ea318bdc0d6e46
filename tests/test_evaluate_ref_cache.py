"""The evaluator's reference cache under concurrent jobs: two workers computing the same
task's reference at once, and a job adding shape re-check outputs to an entry that has
left the cache. Both once turned a correct kernel into a harness error."""

from __future__ import annotations

import os
import shutil
import threading
import uuid

import torch

from davinci_kernel.evaluate.evaluator import Evaluator


def _bare(tmp_path) -> Evaluator:
    ev = Evaluator.__new__(Evaluator)  # the cache only: no worker pool
    ev._ref_cache, ev._ref_lock, ev.tmp_root = {}, threading.Lock(), str(tmp_path / "eval")
    os.makedirs(ev.tmp_root)
    return ev


def _leaf(job_dir, value: torch.Tensor) -> dict:
    path = os.path.join(job_dir, f"{uuid.uuid4().hex[:8]}.bin")
    value.numpy().tofile(path)
    return {"kind": "tensor", "path": path, "shape": list(value.shape), "dtype": str(value.dtype).split(".")[1]}


def _out(tmp_path, trials: int, with_pref: bool) -> dict:
    """A worker's result for the same task and seeds: trial i's reference is i + 1."""
    job = tmp_path / uuid.uuid4().hex[:8]
    job.mkdir()
    leaves = {f"ref{i}": [_leaf(job, torch.full((3,), float(i + 1)))] for i in range(trials)}
    out = {"leaves": leaves}
    if with_pref:
        leaves["pref"] = [_leaf(job, torch.full((5,), 9.0))]
        out["perturb_used"] = {"N": 5}
    return out


def test_two_workers_storing_the_same_reference_keep_the_first(tmp_path):
    ev = _bare(tmp_path)
    key = ("task", "{}", "cpu", (1, 2), "[]", 0)
    first = ev._store_reference(key, _out(tmp_path, 2, with_pref=False))  # a wrong kernel: no re-check
    held = first  # a job that started now holds this entry
    second = ev._store_reference(key, _out(tmp_path, 2, with_pref=True))  # a concurrent correct kernel
    assert second is first and ev._ref_cache[key] is first and os.path.isdir(first["home"])
    assert first["perturb_used"] == {"N": 5} and torch.equal(first["pref"][0], torch.full((5,), 9.0))
    # the job holding the entry finishes its own re-check: nothing to add, no error
    again = ev._store_perturbed(held, _out(tmp_path, 2, with_pref=True))
    assert again is first and [r[0][0].item() for r in first["refs"]] == [1.0, 2.0]


def test_recheck_outputs_for_an_evicted_entry_judge_this_job_only(tmp_path):
    ev = _bare(tmp_path)
    key = ("task", "{}", "cpu", (1,), "[]", 0)
    entry = ev._store_reference(key, _out(tmp_path, 1, with_pref=False))
    with ev._ref_lock:  # evicted while a job still holds it
        ev._ref_cache.pop(key)
        shutil.rmtree(entry["home"])
    got = ev._store_perturbed(entry, _out(tmp_path, 1, with_pref=True))
    assert got is not entry and got["perturb_used"] == {"N": 5} and torch.equal(got["pref"][0], torch.full((5,), 9.0))
    assert entry["perturb_used"] is None and key not in ev._ref_cache
