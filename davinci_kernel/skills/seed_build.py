"""Build the bundled seed library (``seed/seed_skills.jsonl``) from its markdown sources.

Covers: reading every ``seed/*.md`` skill, checking each against the admission
content filter, taking ``verify_speedup`` from a speedup-benchmark JSON when one
is given (``bench/results/skills_speedup.json``: the H200 measurement of each
example against eager PyTorch), and writing the JSONL in the exchange format.
Run ``python -m davinci_kernel.skills.seed_build [--speedups JSON]`` after editing
a source file.

Does not cover: measuring the speedups (``bench/skills_speedup.py``) or running
the examples (``run_examples``).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Optional

from ..files import jsonl_text, write_atomic
from ..records import Skill
from .admit import content_filter
from .markdown import read_skill_file

SEED_DIR = Path(__file__).parent / "seed"
SEED_JSONL = SEED_DIR / "seed_skills.jsonl"


def load_sources(seed_dir: Path = SEED_DIR) -> list[tuple[Skill, dict, Path]]:
    """``[(skill, extra_front_matter, path), ...]`` sorted by name."""
    out = []
    for p in sorted(seed_dir.glob("*.md")):
        skill, extra = read_skill_file(p)
        out.append((skill, extra, p))
    return sorted(out, key=lambda t: t[0].name)


def measured_speedups(path: Optional[Path]) -> dict[str, float]:
    """``{skill_name: speedup}`` from a skills_speedup.json (only correct, measured rows)."""
    if path is None or not Path(path).is_file():
        return {}
    data = json.loads(Path(path).read_text())
    out = {}
    for row in data.get("results", []):
        if row.get("correct") and row.get("speedup") is not None:
            out[row["name"]] = round(float(row["speedup"]), 3)
    return out


def build(out: Path = SEED_JSONL, speedups: Optional[Path] = None) -> list[Skill]:
    measured = measured_speedups(speedups)
    skills = []
    for skill, _, path in load_sources():
        reason = content_filter(skill)
        if reason:
            raise SystemExit(f"{path}: seed skill rejected by the content filter: {reason}")
        if skill.name in measured:
            skill = replace(skill, verify_speedup=measured[skill.name])
        skills.append(skill)
    write_atomic(out, jsonl_text((s.export_dict() for s in skills), ensure_ascii=False))
    return skills


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speedups", type=Path, default=None, help="bench/results/skills_speedup.json")
    ap.add_argument("--out", type=Path, default=SEED_JSONL)
    args = ap.parse_args()
    skills = build(args.out, args.speedups)
    n_measured = sum(s.verify_speedup is not None for s in skills)
    print(f"wrote {len(skills)} skills ({n_measured} with a measured speedup) to {args.out}")


if __name__ == "__main__":
    main()
