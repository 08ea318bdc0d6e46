"""Reference outputs kept between candidates of the same task.

Covers: one entry per (task, size variant, device type, seeds, perturbations, init seed):
the reference process's output files in a folder of their own under the harness's
private folder (mode 0700: no worker uid can open it), mapped copy-on-write rather than
read (5 trials of a 512 MB output would otherwise be read into fresh harness memory), the
reference's shape/dtype list, work, mutation and aliasing facts and its perturbed-size
outputs, and the float64 oracle of every compared call with the precision calibration of the
task's size and of the perturbed size (``precision.py``). The oldest entry leaves when the cache is full (its files are removed; tensors
already handed out stay valid while mapped). Does not cover: computing references
(``reference.py``) or comparing (``judge.py``).
"""

from __future__ import annotations

import collections
import os
import shutil
import tempfile
import threading
from typing import Optional

from .intake import read_reference

MAX_ENTRIES = 64


class ReferenceCache:
    def __init__(self, root: str, max_entries: int = MAX_ENTRIES):
        os.makedirs(root, mode=0o700, exist_ok=True)
        os.chmod(root, 0o700)
        self.root = root
        self.max_entries = max_entries
        self._entries: collections.OrderedDict[tuple, dict] = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> Optional[dict]:
        with self._lock:
            return self._entries.get(key)

    def new_home(self) -> str:
        return tempfile.mkdtemp(prefix="ref-", dir=self.root)

    def build(self, home: str, result: dict, n_trials: int) -> dict:
        """The entry for one reference process reply whose files are in ``home``."""
        leaves = result.get("leaves", {})
        return {
            "home": home,
            "refs": [read_reference(home, leaves[f"ref{i}"]) for i in range(n_trials)],
            "out_meta": leaves.get("ref0"),
            "pref": read_reference(home, leaves["pref"]) if "pref" in leaves else None,
            "perturb_used": result.get("perturb_used") if "pref" in leaves else None,
            "perturb_work": result.get("perturb_work") if "pref" in leaves else None,
            "perturb_plain": result.get("perturb_plain") if "pref" in leaves else None,
            "podd": read_reference(home, leaves["podd"]) if "podd" in leaves else None,
            "odd_used": result.get("odd_used") if "podd" in leaves else None,
            "ref_work": result.get("ref_work"), "ref_plain": result.get("ref_plain"), "ref_moves": bool(result.get("ref_moves")), "ref_mutates": bool(result.get("ref_mutates")),
            "ref_init_work": _work(result.get("ref_init_work")),
            "perturb_init_work": _work(result.get("perturb_init_work")) if "pref" in leaves else None,
            "ref_aliases": bool(result.get("ref_aliases")),
            "ref_nondeterministic": bool(result.get("ref_nondeterministic")),
            "input_bytes": result.get("input_bytes"), "output_bytes": result.get("output_bytes"),
            "param_bytes": result.get("param_bytes"), "ref_flops": result.get("ref_flops") or {},
            "vrefs": [read_reference(home, leaves[f"vref{j}"]) for j in range(sum(k.startswith("vref") for k in leaves))],
            **_precision(home, result),
        }

    def put(self, key: tuple, entry: dict) -> None:
        from .correctness import REFERENCE_FACTS

        for leaves in [*(entry.get("refs") or []), entry.get("pref"), entry.get("podd"), *(entry.get("vrefs") or [])]:
            for x in leaves or []:  # compared with every candidate of the task: their own facts once
                REFERENCE_FACTS.remember(x["values"] if isinstance(x, dict) and "values" in x else x)
        with self._lock:
            self._entries[key] = entry
            while len(self._entries) > self.max_entries:
                _, old = self._entries.popitem(last=False)
                shutil.rmtree(old["home"], ignore_errors=True)  # mapped pages live on until unmapped


def _precision(home: str, result: dict) -> dict:
    """The float64 oracle's leaves of every compared call (trials, timed checks, the
    perturbed size) and the precision calibrations (``precision.py``); an oracle without
    its calibration, or a calibration missing one of its oracle's files, is not kept (the
    fixed limit then applies)."""
    from ..shared.precision import calibration_record

    leaves = result.get("leaves", {})
    out: dict = {}
    for name, src in (("precision", "precision"), ("pprecision", "pprecision")):
        calib = calibration_record(result.get(src))
        keys = calib.get("oracles", []) if calib and "errors" in calib else []
        if calib and "errors" in calib and not all(k in leaves for k in keys):
            calib, keys = {"error": "the oracle's outputs are missing"}, []
        out[name] = calib
        got = {k: read_reference(home, leaves[k]) for k in keys}
        if name == "precision":
            out["oracle"] = [got[k] for k in sorted((k for k in got if k.startswith("oracle")), key=_num)]
            out["voracle"] = [got[k] for k in sorted((k for k in got if k.startswith("voracle")), key=_num)]
        else:
            out["poracle"] = got.get("poracle")
    return out


def _work(x) -> Optional[float]:
    """A construction's work as the reference process measured it, or None."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x else None


def _num(key: str) -> int:
    digits = "".join(c for c in key if c.isdigit())
    return int(digits) if digits else 0
