"""Experiment trackers for training metrics, chosen with the ``report_to`` config field:
``tensorboard`` (event files under ``OUT/tb``), ``wandb`` (Weights & Biases; ``WANDB_PROJECT``,
default ``davinci-kernel``, and ``WANDB_MODE=offline`` work as usual), ``mlflow`` (a run named
after the output folder; ``MLFLOW_TRACKING_URI``, else ``OUT/mlruns``) or ``none``.

Each library is imported only when chosen; ``check(kind)`` tells before any model is loaded
whether the chosen one is installed (a missing one is one line, exit 2). ``metrics.jsonl`` is
written whatever the choice (``metrics_log``). Covers: opening, logging scalars, closing.
Does not cover: which metrics exist (the trainers).
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
from pathlib import Path
from typing import Optional

from ..config import flatten
from ..errors import UsageError

log = logging.getLogger(__name__)
KINDS = ("tensorboard", "wandb", "mlflow", "none")
_MODULE = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


def check(kind: str) -> None:
    """UsageError when the library ``report_to=kind`` needs is not installed."""
    if kind not in KINDS:
        raise UsageError(f"report_to={kind!r}: allowed values are {', '.join(KINDS)}")
    mod = _MODULE.get(kind)
    if mod is not None and importlib.util.find_spec(mod) is None:
        raise UsageError(f"report_to={kind} needs the {mod} package: pip install {mod} (or report_to=none)")


def _scalars(metrics: dict) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class Tracker:
    """One open tracker: ``log(step, metrics)`` for each step, then ``close()``."""

    def __init__(self, kind: str, out: Path, config: Optional[dict] = None):
        self.kind, self._h = kind, None
        out = Path(out)
        if kind == "tensorboard":
            try:
                from torch.utils.tensorboard import SummaryWriter
            except Exception as e:  # noqa: BLE001 - tensorboard missing or broken: the metrics file still has it all
                log.warning("report_to=tensorboard: %s; metrics go to metrics.jsonl only", e)
                return
            self._h = SummaryWriter(str(out / "tb"))
        elif kind == "wandb":
            import wandb

            self._h = wandb.init(project=os.environ.get("WANDB_PROJECT", "davinci-kernel"), name=out.name,
                                 dir=str(out), config=config or {}, resume="allow")
        elif kind == "mlflow":
            import mlflow

            if not os.environ.get("MLFLOW_TRACKING_URI"):
                mlflow.set_tracking_uri((out / "mlruns").resolve().as_uri())
            self._h = mlflow.start_run(run_name=out.name)
            flat = flatten(config or {})
            if flat:
                mlflow.log_params({k: str(v)[:500] for k, v in flat.items()})

    def log(self, step: int, metrics: dict) -> None:
        values = _scalars(metrics)
        if self._h is None or not values:
            return
        if self.kind == "tensorboard":
            for k, v in values.items():
                self._h.add_scalar(k, v, step)
            self._h.flush()
        elif self.kind == "wandb":
            self._h.log(values, step=step)
        elif self.kind == "mlflow":
            import mlflow

            mlflow.log_metrics({k.replace("@", "_"): v for k, v in values.items()}, step=step)

    def close(self) -> None:
        if self._h is None:
            return
        if self.kind == "tensorboard":
            self._h.close()
        elif self.kind == "wandb":
            self._h.finish()
        elif self.kind == "mlflow":
            import mlflow

            mlflow.end_run()
        self._h = None

