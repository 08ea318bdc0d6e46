"""The GPU tests (``pytest -m gpu``) file by file, each under its own time limit, for a device
call with a hard limit: one line per file as it finishes (passed, failed, skipped, seconds),
the whole table at the end, and JSON (``--out``) with each file's counts, failures' names and
the card, torch version and date. Files not reached before ``--budget-s`` are listed as such.

    python bench/gpu_tests.py [--files a.py,b.py] [--per-file-s 240] [--budget-s 560] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def gpu_files() -> list[str]:
    """The test files that hold tests marked ``gpu``."""
    pat = re.compile(r"mark\.gpu|pytestmark\s*=.*gpu")
    return sorted(p.name for p in (ROOT / "tests").glob("test_*.py") if pat.search(p.read_text(encoding="utf-8")))


def run_file(name: str, limit_s: float, junit: Path) -> dict:
    """One file's GPU tests in their own pytest, killed after ``limit_s``."""
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", f"tests/{name}", "-p", "no:cacheprovider",
           f"--junitxml={junit}", f"--timeout={int(limit_s)}"]
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit_s + 15)
        rc, tail = p.returncode, (p.stdout + p.stderr)[-1500:]
    except subprocess.TimeoutExpired as e:
        rc, tail = "timeout", ((e.stdout or b"")[-1500:]).decode(errors="replace") if isinstance(e.stdout, bytes) \
            else str(e.stdout or "")[-1500:]
    row = {"file": name, "rc": rc, "seconds": round(time.monotonic() - t0, 1), "passed": 0, "failed": 0,
           "skipped": 0, "failures": [], "tail": tail}
    if junit.is_file():
        for case in ET.parse(junit).getroot().iter("testcase"):
            tid = f"{case.get('classname', '')}::{case.get('name', '')}"
            if case.find("failure") is not None or case.find("error") is not None:
                row["failed"] += 1
                row["failures"].append(tid)
            elif case.find("skipped") is not None:
                row["skipped"] += 1
            else:
                row["passed"] += 1
    return row


def card() -> str:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception:  # noqa: BLE001 - a card name is a label only
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", default="", help="comma-separated test file names (default: every file with gpu tests)")
    ap.add_argument("--per-file-s", type=float, default=240.0, help="time limit of one file's run")
    ap.add_argument("--budget-s", type=float, default=560.0, help="files not started by then are left out")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "gpu_tests.json"))
    args = ap.parse_args(argv)
    files = [f.strip() for f in args.files.split(",") if f.strip()] or gpu_files()
    import torch

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    t0, rows = time.monotonic(), []
    for name in files:
        left = args.budget_s - (time.monotonic() - t0)
        if left < 20:
            rows.append({"file": name, "rc": "not reached"})
            print(f"{name:40s} not reached", flush=True)
            continue
        row = run_file(name, min(args.per_file_s, left), out.parent / f"junit-{name}.xml")
        rows.append(row)
        print(f"{name:40s} rc={row['rc']!s:8s} passed {row['passed']:3d} failed {row['failed']:3d} "
              f"skipped {row['skipped']:3d} {row['seconds']:6.1f}s", flush=True)
        for f in row["failures"]:
            print(f"    FAILED {f}", flush=True)
    doc = {"card": card(), "torch": torch.__version__, "date": datetime.date.today().isoformat(), "files": rows,
           "totals": {k: sum(r.get(k, 0) for r in rows) for k in ("passed", "failed", "skipped")}}
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(out)
    print("totals:", doc["totals"], "card:", doc["card"], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
