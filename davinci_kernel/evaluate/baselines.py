"""Cache of clean eager and torch.compile timings of each task's reference.

Covers: a JSON file keyed by (task hash, size variant, GPU name, torch version, timing
method); the task hash fixes the problem text and so its dtypes. Written atomically; a corrupt file is
ignored (and rewritten). Does not cover: measuring (worker.Runner.baseline does that).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path


class BaselineCache:
    def __init__(self, cache_dir: str):
        self.path = Path(os.path.expanduser(cache_dir)) / "baselines.json"
        self._lock = threading.Lock()
        self._data = self._load()

    def _load(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    @staticmethod
    def key(task_hash: str, overrides: dict, gpu: str, torch_version: str) -> str:
        from .timing import METHOD

        return f"{task_hash}|{json.dumps(overrides, sort_keys=True)}|{gpu}|{torch_version}|{METHOD}"

    def get(self, key: str):
        with self._lock:
            return self._data.get(key)

    def put(self, key: str, value: dict) -> None:
        with self._lock:
            self._data[key] = value
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.path.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(json.dumps(self._data, indent=1, sort_keys=True))
                os.replace(tmp, self.path)
            except OSError:
                pass  # a read-only cache dir only costs re-measuring
