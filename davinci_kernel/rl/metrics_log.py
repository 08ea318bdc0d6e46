"""Training logs: ``DIR/metrics.jsonl`` (one JSON object per step, with ``step``) and the
tracker ``report_to`` names (``trackers``: TensorBoard event files under ``DIR/tb`` by default,
W&B, MLflow, or none).

Covers: appending, and on resume dropping lines of steps after the checkpoint (those
steps are run again, so each step appears once). Does not cover: computing metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..files import append_jsonl, jsonl_text, read_jsonl, write_atomic
from ..rundir import METRICS_FILE
from .trackers import Tracker


class MetricsLog:
    def __init__(self, out: Path, report_to: str = "tensorboard", resume_step: Optional[int] = None,
                 config: Optional[dict] = None):
        self.path = Path(out) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None:
            self.truncate_after(resume_step)
        elif self.path.exists():
            self.path.unlink()
        self.tracker = Tracker(report_to, Path(out), config) if report_to != "none" else None

    def truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        keep = [rec for rec in read_jsonl(self.path) if int(rec.get("step", 0)) <= step]  # a cut line is dropped
        write_atomic(self.path, jsonl_text(keep))

    def write(self, step: int, metrics: dict) -> None:
        rec = {"step": int(step)}
        rec.update({k: v for k, v in metrics.items() if k != "step"})
        append_jsonl(self.path, [rec])
        if self.tracker is not None:
            self.tracker.log(int(step), rec)

    def close(self) -> None:
        if self.tracker is not None:
            self.tracker.close()


def read_metrics(out: Path) -> list[dict]:
    path = Path(out) / METRICS_FILE
    return read_jsonl(path) if path.exists() else []
