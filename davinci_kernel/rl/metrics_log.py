"""Training logs: ``DIR/metrics.jsonl`` (one JSON object per step, with ``step``) and
TensorBoard event files under ``DIR/tb`` (when tensorboard is installed).

Covers: appending, and on resume dropping lines of steps after the checkpoint (those
steps are run again, so each step appears once). Does not cover: computing metrics.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from ..files import append_jsonl, jsonl_text, read_jsonl, write_atomic
from ..rundir import METRICS_FILE


class MetricsLog:
    def __init__(self, out: Path, tensorboard: bool = True, resume_step: Optional[int] = None):
        self.path = Path(out) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None:
            self.truncate_after(resume_step)
        elif self.path.exists():
            self.path.unlink()
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(Path(out) / "tb"))
            except Exception:  # tensorboard is optional
                self.tb = None

    def truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        keep = [rec for rec in read_jsonl(self.path) if int(rec.get("step", 0)) <= step]  # a cut line is dropped
        write_atomic(self.path, jsonl_text(keep))

    def write(self, step: int, metrics: dict) -> None:
        rec = {"step": int(step)}
        rec.update({k: v for k, v in metrics.items() if k != "step"})
        append_jsonl(self.path, [rec])
        if self.tb is not None:
            for k, v in rec.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    self.tb.add_scalar(k, v, step)
            self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def read_metrics(out: Path) -> list[dict]:
    path = Path(out) / METRICS_FILE
    return read_jsonl(path) if path.exists() else []
