"""Atomic checkpoints: write into a temporary folder, seal it, rename it into place.

Covers: the on-disk protocol of ``DIR/checkpoints/step-N/`` (a ``COMPLETE`` marker
written last, holding a manifest of every file and its size), finding the newest
complete checkpoint (skipping, with a warning, any that is partial, lacks its marker or
whose files no longer match the manifest), pruning old ones, and the RNG state of
python / numpy / torch / CUDA. A ``kill -9`` at any moment leaves either the previous
checkpoints untouched or a new one that is complete: the rename is the commit point.

Does not cover: what goes inside (model, optimizer, trainer state — ``trainer.py``).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

MARKER = "COMPLETE"
_STEP_RE = re.compile(r"^step-(\d+)$")


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step-{step}"


def tmp_dir(root: Path, step: int) -> Path:
    return Path(root) / f".tmp-step-{step}"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def manifest(path: Path) -> dict[str, int]:
    """Relative path → size of every file under ``path`` (except the marker)."""
    out = {}
    for p in sorted(Path(path).rglob("*")):
        if p.is_file() and p.name != MARKER:
            out[p.relative_to(path).as_posix()] = p.stat().st_size
    return out


def seal(tmp: Path, final: Path) -> Path:
    """Write the marker (manifest) into ``tmp``, fsync, and rename it to ``final``."""
    tmp, final = Path(tmp), Path(final)
    for p in tmp.rglob("*"):
        if p.is_file():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
    marker = tmp / MARKER
    with open(marker, "w") as fh:
        json.dump({"files": manifest(tmp)}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    _fsync_dir(tmp)
    if final.exists():  # a re-run of a step after resume: the new one replaces it
        old = final.with_name(final.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)
    _fsync_dir(final.parent)
    return final


def check(path: Path) -> Optional[str]:
    """None if ``path`` is a complete checkpoint, else why not."""
    marker = Path(path) / MARKER
    if not marker.is_file():
        return "no COMPLETE marker (partial write)"
    try:
        files = json.loads(marker.read_text())["files"]
    except (OSError, ValueError, KeyError):
        return "unreadable COMPLETE marker"
    now = manifest(path)
    for name, size in files.items():
        if name not in now:
            return f"missing file {name}"
        if now[name] != size:
            return f"{name} has {now[name]} bytes, expected {size}"
    return None


def checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Every ``step-N`` folder under ``root``, newest first (complete or not)."""
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    for d in root.iterdir():
        m = _STEP_RE.match(d.name)
        if m and d.is_dir():
            out.append((int(m.group(1)), d))
    return sorted(out, reverse=True)


def latest_complete(root: Path, skip: tuple[int, ...] = ()) -> Optional[tuple[int, Path]]:
    """The newest complete checkpoint; broken newer ones are reported with a warning."""
    for step, d in checkpoints(root):
        if step in skip:
            continue
        why = check(d)
        if why is None:
            return step, d
        log.warning("checkpoint %s is not usable (%s); trying the previous one", d, why)
    return None


def cleanup_tmp(root: Path) -> None:
    """Remove temporary folders left by a write that was killed."""
    root = Path(root)
    if root.is_dir():
        for d in root.iterdir():
            if d.name.startswith(".tmp-step-") or d.name.endswith(".old"):
                shutil.rmtree(d, ignore_errors=True)


def prune(root: Path, keep: int) -> None:
    """Delete all but the ``keep`` newest complete checkpoints (broken ones are left for inspection)."""
    complete = [(s, d) for s, d in checkpoints(root) if check(d) is None]
    for _, d in complete[keep:]:
        shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------- RNG
def rng_state() -> dict:
    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
