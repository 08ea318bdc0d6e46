"""The experiment's tasks and kernels.

``task_file`` finds a task's problem file (a built-in task, or a new one under
``bench/coevo/tasks``); ``suite_dir`` / ``load_tasks`` give the chosen tasks as a suite folder
and as ``Task`` records (as the trainer loads them). ``catalogue`` lists, per task, the
kernels the experiment uses, each with its ``role``: for an RL or held-out task its slow,
medium, fast and wrong variants (roles from the protocol); for a practice task with a pair
its ``lacking`` kernels and its ``with`` kernel (and the pair's technique); for any other
practice task the built-in reference (role ``practice``). ``technique_skill`` is the skill a
technique is taught as (its Example the technique's snippet of ``bench/coevo/techniques.py``,
never a whole kernel); ``distractors`` reads the library every arm starts from. Does not
cover: judging the kernels or the SFT rows (``sftdata.py``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .protocol import DISTRACTORS, ROOT, TASK_DIR, VARIANT_DIRS


def task_file(name: str) -> Path:
    from davinci_kernel.tasks.loader import BUILTIN_DIR

    for root in (BUILTIN_DIR, TASK_DIR):
        path = root / f"{name}.py"
        if path.is_file():
            return path
    raise FileNotFoundError(f"task {name}: no problem file in {BUILTIN_DIR} or {TASK_DIR}")


def suite_dir(names, out: Path) -> Path:
    """A suite folder holding only the chosen tasks (same names, same sources)."""
    files = {n: task_file(n) for n in names}  # every file found before anything is removed
    if out.exists():
        shutil.rmtree(out)
    for name, src in files.items():
        dst = out / f"{name}.py"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
    return out


def load_tasks(names, d: Path, folder: str = "suite"):
    """The chosen tasks as ``Task`` records, in the order given (through ``d/folder``)."""
    from davinci_kernel.tasks.loader import load_suite

    names = list(names)
    by_name = {t.name: t for t in load_suite(str(suite_dir(names, Path(d) / folder)))}
    return [by_name[n] for n in names]


def manifests() -> dict[str, dict[str, dict]]:
    """task -> variant name -> {name, path, correct, what, role?, technique?}, over every
    variant folder that exists (a later folder's entry wins)."""
    out: dict[str, dict[str, dict]] = {}
    for folder in VARIANT_DIRS:
        path = folder / "manifest.json"
        if not path.is_file():
            continue
        for task, vs in json.loads(path.read_text())["tasks"].items():
            for v in vs:
                out.setdefault(task, {})[v["name"]] = dict(v, path=str((folder / v["file"]).resolve()))
    return out


def _reference(task_name: str) -> dict:
    """The built-in reference kernel, described by its docstring's first sentence."""
    import ast

    from davinci_kernel.tasks.loader import REFERENCE_DIR

    path = REFERENCE_DIR / f"{task_name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"practice task {task_name} has no (lacking, with) pair and no built-in reference")
    doc = ast.get_docstring(ast.parse(path.read_text())) or "the built-in reference kernel"
    what = " ".join(doc.split()).split(". ")[0].rstrip(".")
    return {"name": "reference", "path": str(path), "correct": True, "what": what}


def _named(known: dict, task: str, named: list[tuple[str, str]]) -> list[dict]:
    missing = [n for _, n in named if n not in known.get(task, {})]
    if missing:
        raise FileNotFoundError(f"{task}: no variant named {', '.join(missing)} in the manifests of "
                                f"{', '.join(str(f.relative_to(ROOT)) for f in VARIANT_DIRS)}")
    return [dict(known[task][n], role=r) for r, n in named]


def catalogue(p: dict) -> dict[str, list[dict]]:
    """task -> its kernels ({name, role, correct, what, source, technique?}): RL tasks,
    held-out tasks, then practice tasks."""
    known = manifests()
    out: dict[str, list[dict]] = {}
    for key in ("rl_tasks", "heldout_tasks"):
        for task, spec in p[key].items():
            roles = spec["roles"]
            if roles is None:
                raise FileNotFoundError(f"{task}: its variant roles are not in bench/coevo/variants/manifest.json")
            named = [(r, roles[r]) for r in ("slow", "medium", "fast")] + [("wrong", w) for w in roles["wrong"]]
            out[task] = [dict(k, technique=spec["technique"]) for k in _named(known, task, named)]
    sets = [set(p["rl_tasks"]), set(p["heldout_tasks"]), set(p["practice_tasks"])]
    for i, a in enumerate(sets):
        for b in sets[i + 1:]:
            if a & b:
                raise ValueError(f"{sorted(a & b)[0]} is in two of the task sets")
    for task in p["practice_tasks"]:
        pair = p["practice_pairs"].get(task)
        if pair is None:
            out[task] = [dict(_reference(task), role="practice")]
            continue
        named = [("lacking", n) for n in pair["lacking"]] + [("with", pair["with"])]
        out[task] = [dict(k, technique=pair["technique"]) for k in _named(known, task, named)]
    for ks in out.values():
        for k in ks:
            k["source"] = Path(k.pop("path")).read_text()
    return out


def by_role(kernels: list[dict]) -> dict:
    """A task's kernels by role (``wrong`` and ``lacking`` -> lists)."""
    out: dict = {"wrong": [], "lacking": []}
    for k in kernels:
        if k["role"] in ("wrong", "lacking"):
            out[k["role"]].append(k)
        else:
            out[k["role"]] = k
    return out


# ----------------------------------------------------------------------------- skills
def technique_skill(technique_id: str) -> dict:
    """The skill (exchange format) a technique is taught as: when it applies (its trigger),
    its key idea, and its Example the technique's snippet."""
    from .techniques import TECHNIQUES

    t = TECHNIQUES[technique_id]
    trigger = " ".join(str(t["trigger"]).split()).rstrip(".")
    return {"name": technique_id, "description": f"Use when {trigger[0].lower() + trigger[1:]}: {t['title']}.",
            "scope": "general", "tags": ["triton", *technique_id.split("_")],
            "content": (f"## Motivation\nApplies when {trigger[0].lower() + trigger[1:]}.\n"
                        f"## Key Idea\n{' '.join(str(t['key_idea']).split())}\n"
                        f"## Example\n```python\n{str(t['example']).strip()}\n```")}


def distractors(path: Path = DISTRACTORS) -> list[dict]:
    """The distractor skills (exchange format), one per line."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def admission_refusal(skill, best_code: str | None = None) -> str | None:
    """Why the admission filter refuses ``skill`` (a dict or a Skill), None when it passes:
    its static checks, with the episode's best kernel where the filter takes one (a skill
    whose Example copies that kernel is a solution, not a technique)."""
    import inspect

    from davinci_kernel.records import Skill
    from davinci_kernel.skills.admit import content_filter

    s = Skill.from_dict(skill) if isinstance(skill, dict) else skill
    if best_code is not None and len(inspect.signature(content_filter).parameters) > 1:
        return content_filter(s, best_code)
    return content_filter(s)


def skill_example(skill) -> str:
    """The code of a skill's ``## Example`` (all its code blocks, joined)."""
    from davinci_kernel.skills.markdown import example_blocks

    content = skill["content"] if isinstance(skill, dict) else skill.content
    return "\n".join(code for _, code in example_blocks(content))
