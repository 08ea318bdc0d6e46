"""Cache of clean eager and torch.compile timings of each task's reference.

Covers: a JSON file keyed by (task hash, size variant, GPU name, torch version, timing
method); the task hash fixes the problem text and so its dtypes. Written atomically under an
exclusive lock (``baselines.json.lock``, the OS's ``flock``): each write re-reads the file and
adds its entry, so two runs sharing the cache never lose each other's entries; a miss re-reads
the file too (another run may have measured it). A corrupt file is ignored (and rewritten). Does not cover: measuring (``reference.baseline`` does that).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from ... import locks
from ...errors import UsageError
from ...files import write_atomic


def vs_compile(speedup: float, eager_ms: float, compile_ms: float, ref_ms: float) -> tuple[float, float]:
    """(torch.compile runtime beside this run, speedup vs torch.compile).

    ``speedup`` = eager / candidate, measured pair by pair beside the reference; the cached
    baselines give compile / eager, so  vs compile = speedup * compile_ms / eager_ms, and
    the compile runtime is scaled to this run's reference time ``ref_ms``."""
    ratio = compile_ms / eager_ms  # < 1 when torch.compile beats eager
    return ref_ms * ratio, speedup * ratio


class BaselineCache:
    def __init__(self, cache_dir: str):
        self.path = Path(os.path.expanduser(cache_dir)) / "baselines.json"
        self._lock = threading.Lock()
        self._data = self._load()

    def _load(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @staticmethod
    def key(task_hash: str, overrides: dict, gpu: str, torch_version: str, method_extra: str = "") -> str:
        from ..shared.timing import METHOD

        method = f"{METHOD}+{method_extra}" if method_extra else METHOD
        return f"{task_hash}|{json.dumps(overrides, sort_keys=True)}|{gpu}|{torch_version}|{method}"

    @staticmethod
    def of_task(key: str, task_hash: str) -> bool:
        """Whether ``key`` (made by ``key``) is one of this task's entries, any sizes or GPU."""
        return key.startswith(f"{task_hash}|")

    def get(self, key: str):
        with self._lock:
            if key not in self._data:
                self._data.update(self._load())
            return self._data.get(key)

    def put(self, key: str, value: dict) -> None:
        with self._lock:
            self._data[key] = value
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with locks.hold(self.path.with_name(self.path.name + ".lock"), str(self.path), wait=True):
                    merged = {**self._load(), key: value}
                    write_atomic(self.path, json.dumps(merged, indent=1, sort_keys=True))
                self._data.update(merged)
            except (OSError, UsageError):
                pass  # a read-only cache dir only costs re-measuring
