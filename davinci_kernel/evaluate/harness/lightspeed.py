"""Speed of light: the least time a problem can take on this card, each candidate's share
of it, and the verdict on a timed figure below it.

Covers, in the harness process: the floor of one problem (``floor``: the least bytes it
moves, its inputs read once plus its outputs written once, over the card's measured copy
bandwidth, and the reference's matrix FLOPs by dtype over the card's measured matmul peak
of that dtype; the larger of the two is ``floor_ms``), ``peak_fraction`` (floor / timed
time, the fraction of peak KernelBench-Hard reports), the ``faster_than_light`` verdict and
the cache of measured peaks (``PeakCache``: one entry per card, with its provenance; an
entry made under another driver or torch is ignored and measured again, with one line).

The verdict uses the byte term alone: the reference's FLOPs are not a bound (a candidate
may skip work the reference wastes, an algebraic shortcut; or run float32 matmuls as
TF32), its bytes nearly are. Of the outputs it counts only what does not fit in the L2
cache (``l2_bytes`` of the card; an output that stays there is written back after the
call's end event), so its bytes are ``verdict_bytes`` = inputs + outputs beyond the L2 (the
inputs were evicted by the flush before every timed call). A timed time below
``verdict_ms / FTL_MARGIN`` is rejected. ``FTL_MARGIN`` = 2 covers what a correct kernel
may still gain over a copy: a read-only stream faster than a copy (about 10 %), a clock
boost beyond the measurement's, timer granularity. Floors under ``FTL_MIN_FLOOR_MS`` are
never judged (launch latency, not bandwidth, bounds those calls). What it does not
cover: a problem whose inputs a correct kernel need not read entirely (a slice of a large
input): by more than half, such a kernel would be rejected; none of the built-in suite
is one. Measuring (``shared/roofline.py``, in a reference process) is not here.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Optional

from ... import locks
from ...errors import UsageError
from ...files import write_atomic

FTL_MARGIN = 2.0  # a timed time below the byte floor / this is faster_than_light
FTL_MIN_FLOOR_MS = 0.005  # byte floors below this (5 us) are not judged


def floor(input_bytes: float, output_bytes: float, flops: dict, peaks: dict) -> Optional[dict]:
    """The problem's speed-of-light floor on a card with ``peaks`` (``roofline.measure_peaks``):
    {"bytes", "bytes_ms", "flops", "compute_ms", "floor_ms", "bound"} or None without a
    bandwidth. FLOPs of a dtype the card was not measured in, or of an unknown dtype, count
    at the fastest measured peak (the floor stays a floor); float32 FLOPs at the higher of the
    float32 and TF32 peaks (an honest float32 matmul may run in TF32)."""
    gbps = float(peaks.get("copy_gbps") or 0.0)
    if not gbps > 0:
        return None
    tf = {k: float(v) for k, v in (peaks.get("matmul_tflops") or {}).items() if isinstance(v, (int, float)) and v > 0}
    fastest = max(tf.values(), default=0.0)
    if "tf32" in tf:  # float32 matmuls may run on tensor cores (TF32 is honest: the precision limit allows it)
        tf["float32"] = max(tf.get("float32", 0.0), tf["tf32"])
    moved = float(input_bytes or 0) + float(output_bytes or 0)
    bytes_ms = moved / (gbps * 1e9) * 1e3
    compute_ms = 0.0
    for dtype, f in (flops or {}).items():
        peak = tf.get(dtype) or fastest
        if peak > 0 and f > 0:
            compute_ms += float(f) / (peak * 1e12) * 1e3
    floor_ms = max(bytes_ms, compute_ms)
    l2 = float(peaks.get("l2_bytes") or 0.0)
    verdict_bytes = float(input_bytes or 0) + max(0.0, float(output_bytes or 0) - l2)
    return {"bytes": moved, "bytes_ms": bytes_ms, "flops": dict(flops or {}), "compute_ms": compute_ms,
            "floor_ms": floor_ms, "bound": "compute" if compute_ms > bytes_ms else "memory",
            "verdict_bytes": verdict_bytes, "verdict_ms": verdict_bytes / (gbps * 1e9) * 1e3}


def peak_fraction(floor_ms: Optional[float], runtime_ms: Optional[float]) -> Optional[float]:
    """floor / timed time: 1.0 runs at the card's peak; above 1 the candidate did less (or
    cheaper) work than the reference's roofline counts. None without either."""
    if not floor_ms or not runtime_ms or runtime_ms <= 0:
        return None
    return floor_ms / runtime_ms


def faster_than_light(runtime_ms: Optional[float], fl: Optional[dict]) -> Optional[str]:
    """The verdict's message when ``runtime_ms`` is below the byte floor by more than
    ``FTL_MARGIN``; None otherwise (or when there is no floor to judge by)."""
    if runtime_ms is None or not fl or fl["verdict_ms"] < FTL_MIN_FLOOR_MS:
        return None
    if runtime_ms * FTL_MARGIN < fl["verdict_ms"]:
        return (f"timed at {runtime_ms:.4g} ms, but reading its inputs once and writing its outputs beyond the L2 "
                f"cache ({fl['verdict_bytes'] / 1e6:.4g} MB) takes {fl['verdict_ms']:.4g} ms at this card's measured "
                f"copy bandwidth, more than {FTL_MARGIN:g}x the timed time: the time or the work is not what it claims")
    return None


class PeakCache:
    """``CACHE_DIR/peaks.json``: the measured peaks per card name, each with the provenance it
    was measured under (card, driver, torch). Written atomically under a lock."""

    def __init__(self, cache_dir: str):
        self.path = Path(os.path.expanduser(cache_dir)) / "peaks.json"
        self._lock = threading.Lock()

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, prov: dict, say=None) -> Optional[dict]:
        """The entry for this card when its provenance is ``prov``; an entry of the same card
        under another driver or torch is ignored, and ``say`` (default: stderr) gets one line."""
        with self._lock:
            entry = self._load().get(str(prov.get("gpu")))
        if not isinstance(entry, dict):
            return None
        was = entry.get("provenance") or {}
        if was != prov:
            (say or _stderr)(f"note: the peaks cached in {self.path} were measured under {_describe(was)}, not "
                             f"{_describe(prov)}: measuring this card's peaks again")
            return None
        return entry

    def put(self, entry: dict) -> None:
        prov = entry.get("provenance") or {}
        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with locks.hold(self.path.with_name(self.path.name + ".lock"), str(self.path), wait=True):
                    merged = {**self._load(), str(prov.get("gpu")): entry}
                    write_atomic(self.path, json.dumps(merged, indent=1, sort_keys=True))
            except (OSError, UsageError):
                pass  # a read-only cache dir only costs measuring again


def _describe(prov: dict) -> str:
    return f"{prov.get('gpu', '?')}, driver {prov.get('driver', '?')}, torch {prov.get('torch', '?')}"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
