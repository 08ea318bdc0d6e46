"""Reading a RUN_DIR (``davinci_kernel.rundir``) for the report: whatever subset of its files is there.

Covers: ``results.jsonl`` (EvalResult dicts, grouped by an optional ``which`` marker such
as ``best`` / ``last``, one result per task per group; harness self-check lines, marked
``self_check``, form their own group), ``metrics.jsonl`` (one training step per line), a
skill-library JSONL export and ``run.json`` metadata.

``results.jsonl`` is read strictly, since it is what the report's numbers come from: every
line must be an EvalResult record (the record's fields with their types, plus the keys the
run commands add: ``which``, ``turn``, ``skills`` and a candidate path), each task has
exactly one line per group, and self-check lines are not mixed with real results;
otherwise ``load_run`` raises UsageError naming the first offending line. The other files
are read leniently: unreadable lines are skipped and reported as notes, and missing files
simply leave their part empty. Does not cover metrics or rendering.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..errors import UsageError
from ..files import iter_jsonl, read_jsonl
from ..records import EvalResult
from ..rundir import METRICS_FILE, RESULTS_FILE, RUN_FILE, SKILLS_FILE
from .fastp import level_of

SKILL_FILES = (SKILLS_FILE, "skill_library.jsonl", "skills/skills.jsonl")
KNOWN_FILES = (RESULTS_FILE, METRICS_FILE, RUN_FILE) + SKILL_FILES
CANDIDATE_KEYS = ("candidate", "candidate_path", "kernel_path", "code_path")
GROUP_ORDER = ("best", "last")
SELF_CHECK_GROUP = "harness self-check"
# keys the run commands add to an EvalResult line: dvk run/optimize (which, turn, skills),
# dvk bench (candidate)
EXTRA_KEYS = {"which": (str,), "turn": (int,), "skills": (list,)}


@dataclass
class RunData:
    """Everything the report shows about one run directory."""

    path: Path
    meta: dict[str, Any] = field(default_factory=dict)
    groups: dict[str, list[dict]] = field(default_factory=dict)  # "" when unmarked
    metrics: list[dict] = field(default_factory=list)  # sorted by step
    skills: list[dict] = field(default_factory=list)
    skills_file: Optional[str] = None
    totals: Optional[dict[int, int]] = None  # tasks per level, when run.json says
    notes: list[str] = field(default_factory=list)

    @property
    def primary_group(self) -> Optional[str]:
        return next(iter(self.groups), None)

    @property
    def has_results(self) -> bool:
        return any(self.groups.values())


def _read_jsonl(path: Path, notes: list[str]) -> list[dict]:
    bad: list[int] = []
    rows = read_jsonl(path, on_bad=lambda n, why: bad.append(n))
    if bad:
        notes.append(f"{path.name}: skipped {len(bad)} line(s) that are not JSON objects")
    return rows


def _number(value) -> Optional[float]:
    if isinstance(value, bool) or value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _clean_result(row: dict) -> dict:
    """Normalise the fields the report reads; other keys pass through untouched."""
    out = dict(row)
    out["task"] = str(row.get("task") or "")
    out["correct"] = bool(row.get("correct"))
    out["compiled"] = bool(row.get("compiled"))
    flags = row.get("flags") or []
    out["flags"] = [str(f) for f in flags] if isinstance(flags, list) else [str(flags)]
    for key in ("speedup", "speedup_compile", "runtime_ms", "ref_runtime_ms", "compile_runtime_ms"):
        x = _number(row.get(key))
        out[key] = x if x is not None and x > 0 else None  # a ratio or time <= 0 is no measurement
    ci = row.get("speedup_ci")
    lo_hi = [_number(x) for x in ci] if isinstance(ci, list) and len(ci) == 2 else [None, None]
    out["speedup_ci"] = lo_hi if None not in lo_hi and 0 < lo_hi[0] <= lo_hi[1] else None
    pf = _number(row.get("peak_fraction"))
    out["peak_fraction"] = pf if pf is not None and pf > 0 else None
    cov = _number(row.get("coverage"))
    out["coverage"] = cov if cov is not None and cov >= 0 else None
    try:
        out["level"] = int(row.get("level") or 0)
    except (TypeError, ValueError):
        out["level"] = 0
    out["level"] = level_of(out)  # 0 only when neither the field nor the task name says
    return out


def _natural(text: str) -> tuple:
    """Sort key that puts ``level1/2_x`` before ``level1/10_x``."""
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text) if t)


def _field_types() -> dict[str, tuple]:
    """EvalResult field → the JSON types its value may have."""
    simple = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,)}
    out: dict[str, tuple] = {}
    for f in dataclasses.fields(EvalResult):
        t = str(f.type).replace(" ", "")
        optional = t.startswith("Optional[")
        t = t[len("Optional["):-1] if optional else t
        kinds = simple.get(t) or ((list,) if t.startswith("list[") else (dict,) if t.startswith("dict[") else None)
        if kinds is None:
            continue  # a type this reader does not know: any value
        out[f.name] = kinds + ((type(None),) if optional else ())
    return out


_FIELD_TYPES = _field_types()


def _not_a_result(row) -> Optional[str]:
    """Why ``row`` is not an EvalResult line (None when it is one)."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not an object"
    task = row.get("task")
    if not isinstance(task, str) or not task.strip():
        return "no task name"
    for key, value in row.items():
        kinds = _FIELD_TYPES.get(key) or EXTRA_KEYS.get(key)
        if kinds is None:
            if key in CANDIDATE_KEYS:
                kinds = (str, type(None))
            elif any(f.name == key for f in dataclasses.fields(EvalResult)):
                continue
            else:
                return f"unknown key {key[:40]!r}"
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            return f"{key} is {type(value).__name__}, not {'/'.join(k.__name__ for k in kinds)}"
    return None


def read_results(path: Path) -> list[dict]:
    """Every line of a results.jsonl as a dict; UsageError at the first line that is not an
    EvalResult record (blank lines are allowed)."""
    def refuse(n: int, why: str) -> None:
        raise UsageError(f"{path}: line {n} is not an evaluation result ({why}); "
                         "refusing a results file with lines it did not expect")

    rows = []
    for n, obj in iter_jsonl(path, on_bad=refuse):
        why = _not_a_result(obj)
        if why:
            refuse(n, why)
        obj["_line"] = n
        rows.append(obj)
    return rows


def _group_results(rows: list[dict], path: Path) -> dict[str, list[dict]]:
    """One result per task per group; UsageError on a repeated task or mixed self-check lines."""
    groups: dict[str, dict[str, dict]] = {}
    kinds = {bool(r.get("self_check")) for r in rows}
    if len(kinds) > 1:
        first = next(r for r in rows if r.get("self_check"))
        raise UsageError(f"{path}: line {first['_line']} is a harness self-check result among real results; "
                         "refusing a results file that mixes them")
    for raw in rows:
        n = raw.pop("_line")
        row = _clean_result(raw)
        which = SELF_CHECK_GROUP if raw.get("self_check") else str(raw.get("which") or "")
        by_task = groups.setdefault(which, {})
        old = by_task.get(row["task"])
        if old is not None:
            label = f" (which={which})" if raw.get("which") else ""
            raise UsageError(f"{path}: task {row['task'][:80]!r}{label} has two lines ({old['_line']} and {n}); "
                             "refusing a results file with duplicates")
        row["_line"] = n
        by_task[row["task"]] = row
    for by_task in groups.values():
        for row in by_task.values():
            row.pop("_line", None)
    order = [g for g in GROUP_ORDER if g in groups] + sorted(g for g in groups if g not in GROUP_ORDER)
    return {g: sorted(groups[g].values(), key=lambda r: (r["level"], _natural(r["task"]))) for g in order}


def _read_metrics(path: Path, notes: list[str]) -> list[dict]:
    rows = []
    for i, raw in enumerate(_read_jsonl(path, notes)):
        step = _number(raw.get("step"))
        row = {"step": int(step) if step is not None else i}
        for key, value in raw.items():
            if key != "step":
                x = _number(value)
                if x is not None:
                    row[key] = x
        rows.append(row)
    return sorted(rows, key=lambda r: r["step"])


def _read_meta(path: Path, notes: list[str]) -> dict:
    try:
        meta = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError as e:
        notes.append(f"{RUN_FILE}: not valid JSON ({e.msg} at line {e.lineno}); metadata not shown")
        return {}
    if not isinstance(meta, dict):
        notes.append(f"{RUN_FILE}: not a JSON object; metadata not shown")
        return {}
    return meta


def _totals(meta: dict) -> Optional[dict[int, int]]:
    raw = meta.get("totals")
    if not isinstance(raw, dict):
        return None
    out = {}
    for k, v in raw.items():
        try:
            out[int(str(k).removeprefix("level"))] = int(v)
        except (TypeError, ValueError):
            return None
    return out or None


def candidate_path(row: dict, run_dir: Path) -> Optional[Path]:
    """The kernel file a result names (None when none is named). Relative paths are read
    against RUN_DIR, else against the working directory when the file is found there."""
    for key in CANDIDATE_KEYS:
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            p = Path(value.strip()).expanduser()
            if p.is_absolute():
                return p
            if not (run_dir / p).exists() and p.exists():  # written relative to the working dir
                return p.resolve()
            return run_dir / p
    return None


def load_run(run_dir) -> RunData:
    """Read RUN_DIR; raise UsageError when it is missing or holds none of the known files."""
    path = Path(run_dir).expanduser()
    if not path.exists():
        raise UsageError(f"run directory not found: {path} (pass the --out directory of dvk bench/run/train)")
    if not path.is_dir():
        raise UsageError(f"not a directory: {path} (dvk report takes a run directory, not a file)")
    present = [name for name in KNOWN_FILES if (path / name).is_file()]
    if not present:
        raise UsageError(f"nothing to report in {path}: expected one of "
                         f"{', '.join(KNOWN_FILES[:4])}")
    run = RunData(path=path.resolve())
    notes = run.notes
    if (path / RUN_FILE).is_file():
        run.meta = _read_meta(path / RUN_FILE, notes)
        run.totals = _totals(run.meta)
    if (path / RESULTS_FILE).is_file():
        run.groups = _group_results(read_results(path / RESULTS_FILE), path / RESULTS_FILE)
        if SELF_CHECK_GROUP in run.groups:
            notes.append("harness self-check: each problem's own Model judged as its candidate "
                         "(dvk bench --candidates self); these are not solutions")
    if (path / METRICS_FILE).is_file():
        run.metrics = _read_metrics(path / METRICS_FILE, notes)
    for name in SKILL_FILES:
        if (path / name).is_file():
            run.skills = _read_jsonl(path / name, notes)
            run.skills_file = name
            break
    if not (run.has_results or run.metrics or run.skills or run.meta):
        detail = f" ({notes[0]})" if notes else ""
        raise UsageError(f"nothing to report in {path}: {', '.join(present)} hold(s) no records{detail}")
    return run
