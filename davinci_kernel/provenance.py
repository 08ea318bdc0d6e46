"""Provenance: what a run ran on, recorded in its ``run.json`` so a result can be reproduced.

Covers: ``collect(sandbox=...)`` — the versions of davinci-kernel, Python, torch, Triton and
CUDA, the git commit of the checkout the package runs from (when it is one), the NVIDIA
driver, the GPUs' names and count, and the sandbox the caller reports — and ``record``, which
puts it into a run's metadata, keeping the provenance of a resumed run's earlier starts
when it differs. Nothing here initialises CUDA in the calling process: GPUs and driver are
read from ``nvidia-smi`` (or ``/proc/driver/nvidia/version``), versions from package
metadata. Does not cover: probing the sandbox (the evaluator does; its caller passes the
description in) or what the server of a model reports (``llm``).
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Optional

KEYS = ("davinci_kernel", "git_sha", "python", "torch", "triton", "cuda", "driver", "gpu", "gpu_count", "sandbox")
SOURCE_ROOT = Path(__file__).resolve().parent.parent  # the checkout, when the package runs from one


def _dist_version(name: str) -> Optional[str]:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _run(argv: list[str], cwd: Optional[Path] = None) -> Optional[str]:
    try:
        r = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def git_sha(root: Path = SOURCE_ROOT) -> Optional[str]:
    """The commit checked out at ``root`` (``+dirty`` when tracked files changed), or None
    outside a git checkout."""
    if not (root / ".git").exists() or shutil.which("git") is None:
        return None
    sha = _run(["git", "rev-parse", "HEAD"], cwd=root)
    if not sha:
        return None
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root)
    return sha + ("+dirty" if dirty else "")


def _torch_cuda() -> tuple[Optional[str], Optional[str]]:
    """(torch version, the CUDA version torch was built with); None for what is missing."""
    try:
        import torch
    except ImportError:
        return None, None
    return str(torch.__version__), getattr(torch.version, "cuda", None)


def gpus() -> tuple[list[str], Optional[str]]:
    """(GPU names, driver version) from ``nvidia-smi``; ([], driver or None) without it."""
    names: list[str] = []
    driver = None
    if shutil.which("nvidia-smi"):
        out = _run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
        for line in (out or "").splitlines():
            name, _, drv = line.partition(",")
            if name.strip():
                names.append(name.strip())
                driver = driver or drv.strip() or None
    if driver is None:
        try:
            text = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
        driver = m.group(1) if m else None
    return names, driver


def collect(sandbox: Optional[str] = None) -> dict[str, Any]:
    """One provenance object (the keys of ``KEYS``, None where unknown). ``gpu`` names the
    GPUs (one name, or ``N x NAME`` when they are alike, else the names joined by ``, ``)."""
    torch_v, cuda_v = _torch_cuda()
    names, driver = gpus()
    if not names:
        gpu = None
    elif len(set(names)) == 1:
        gpu = names[0] if len(names) == 1 else f"{len(names)} x {names[0]}"
    else:
        gpu = ", ".join(names)
    return {
        "davinci_kernel": _dist_version("davinci-kernel") or _package_version(),
        "git_sha": git_sha(),
        "python": platform.python_version(),
        "torch": torch_v,
        "triton": _dist_version("triton"),
        "cuda": cuda_v,
        "driver": driver,
        "gpu": gpu,
        "gpu_count": len(names),
        "sandbox": sandbox,
        "platform": f"{platform.system()} {platform.machine()}",
    }


def _package_version() -> Optional[str]:
    from . import __version__ as v  # the source tree's own version when not installed

    return v


def record(meta: dict, old: Optional[dict] = None, sandbox: Optional[str] = None) -> dict:
    """``meta`` with ``provenance`` set to this start's. A resumed run (``old`` is its
    earlier run.json) keeps each earlier, different provenance in ``provenance_history``, so
    a run continued on another machine or version says so."""
    new = collect(sandbox)
    history = list((old or {}).get("provenance_history") or [])
    before = (old or {}).get("provenance")
    if isinstance(before, dict) and _differs(before, new) and before not in history:
        history.append(before)
    meta = dict(meta)
    meta["provenance"] = new
    if history:
        meta["provenance_history"] = history
    return meta


def _differs(a: dict, b: dict) -> bool:
    return any(a.get(k) != b.get(k) for k in KEYS)


def items(prov: dict) -> list[tuple[str, str]]:
    """(key, value) pairs for a report, in ``KEYS`` order; unknown values read ``—``."""
    return [(k, "—" if prov.get(k) in (None, "") else str(prov[k])) for k in KEYS]


def summary(prov: dict) -> str:
    """One line for a terminal: ``dvk 0.1.0 (abc1234) · torch … · GPU …``."""
    sha = prov.get("git_sha")
    if sha:
        sha = sha[:12] + ("+dirty" if sha.endswith("+dirty") else "")
    parts = [f"dvk {prov.get('davinci_kernel') or '?'}" + (f" ({sha})" if sha else "")]
    parts += [f"{k} {prov[k]}" for k in ("python", "torch", "triton", "cuda") if prov.get(k)]
    if prov.get("gpu"):
        parts.append(f"GPU {prov['gpu']}" + (f", driver {prov['driver']}" if prov.get("driver") else ""))
    else:
        parts.append("no GPU")
    if prov.get("sandbox"):
        parts.append(f"sandbox {prov['sandbox']}")
    return " · ".join(parts)
