"""The experiment's kernels and its SFT data.

``catalogue`` lists, per task, the kernels the experiment uses: for an evaluation task its
slow, medium, fast and wrong variants (roles from the protocol); for a practice task every
correct kernel we have (the built-in reference, and the correct variants of
``bench/learning/variants``). ``sft_rows`` builds the SFT conversations:

- evaluation tasks, turn 1 (no skills): slow, medium or a wrong variant, never the fast one;
- evaluation tasks, turn 2: after a slow or medium turn 1 and the evaluator's "correct,
  make it faster" feedback, the fast variant ``fast_share`` of the time, else the medium one;
  after a wrong turn 1 and its "incorrect" feedback, the medium one;
- practice tasks: follow a skill (a system-prompt skill whose Example is kernel K is answered
  with the kernel built on K, also beside another task's skill), summarize (a first and a
  best kernel give a skill whose Example is the best one), select (the candidates whose tags
  name this module, or none when none does).

``fast_turn1_violations`` is the guard run before training and in the tests. Does not
cover: judging the kernels or training (``bench/coevolution.py``).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from kernel_variants import module_name, normalized, variant_skill

from .protocol import VARIANT_DIRS


# ----------------------------------------------------------------------------- kernels
def _manifests() -> dict[str, dict[str, dict]]:
    """task -> variant name -> {name, path, correct, what}, over every variant folder."""
    out: dict[str, dict[str, dict]] = {}
    for folder in VARIANT_DIRS:
        tasks = json.loads((folder / "manifest.json").read_text())["tasks"]
        for task, vs in tasks.items():
            for v in vs:
                out.setdefault(task, {})[v["name"]] = dict(v, path=str(folder / v["file"]))
    return out


def _reference(task_name: str) -> dict:
    """The built-in reference kernel, described by its docstring's first sentence."""
    import ast

    from davinci_kernel.tasks.loader import REFERENCE_DIR

    path = REFERENCE_DIR / f"{task_name}.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) or "the built-in reference kernel"
    what = " ".join(doc.split()).split(". ")[0].rstrip(".")
    return {"name": "reference", "path": str(path), "correct": True, "what": what}


def catalogue(p: dict) -> dict[str, list[dict]]:
    """task -> its kernels ({name, role, correct, what, source}); evaluation tasks first."""
    known = _manifests()
    out: dict[str, list[dict]] = {}
    for task, roles in p["eval_tasks"].items():
        named = [(r, roles[r]) for r in ("slow", "medium", "fast")] + [("wrong", w) for w in roles["wrong"]]
        if task not in known or any(n not in known[task] for _, n in named):
            missing = [n for _, n in named if n not in known.get(task, {})]
            raise FileNotFoundError(f"{task}: no variant named {', '.join(missing)} in {', '.join(map(str, VARIANT_DIRS))}")
        out[task] = [dict(known[task][n], role=r) for r, n in named]
    for task in p["practice_tasks"]:
        if task in p["eval_tasks"]:
            raise ValueError(f"{task} is both an evaluation and a practice task")
        ks = [dict(v, role="practice") for v in known.get(task, {}).values()
              if v["correct"] and not v["name"].startswith("wrong")]
        out[task] = [dict(_reference(task), role="practice")] + ks
    for ks in out.values():
        for k in ks:
            k["source"] = Path(k.pop("path")).read_text()
    return out


def by_role(kernels: list[dict]) -> dict[str, dict]:
    """An evaluation task's kernels by role (``wrong`` -> the list of wrong ones)."""
    out: dict = {"wrong": []}
    for k in kernels:
        if k["role"] == "wrong":
            out["wrong"].append(k)
        else:
            out[k["role"]] = k
    return out


# ----------------------------------------------------------------------------- rows
def _code(src: str) -> str:
    return "```python\n" + src.strip() + "\n```"


def _tool(name: str, arguments: dict) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def _result(verdicts: dict, task: str, kernel: dict):
    """The evaluator's verdict on a kernel (its feedback is what a real turn 2 reads), or a
    plain one where the kernel was not judged."""
    from davinci_kernel.records import EvalResult

    got = verdicts.get((task, kernel["name"]))
    if got is not None:
        return EvalResult.from_dict(got)
    return EvalResult(task=task, compiled=True, correct=kernel["correct"], trials=5,
                      trials_passed=5 if kernel["correct"] else 0)


def eval_rows(p: dict, task, kernels: list[dict], verdicts: dict) -> list[dict]:
    """Turn 1 never the fast variant; turn 2 the fast one only after "correct" feedback."""
    from davinci_kernel.agents.policy import feedback_message, first_messages

    s, T = p["sft"], p["rl"]["turns"]
    k = by_role(kernels)
    first = first_messages(task, (), "triton")
    rows = []

    def row(kind: str, msgs: list[dict], answer: dict, turn1: dict | None = None) -> None:
        rows.append({"task": task.name, "role": "policy", "kind": kind, "answer": answer["name"],
                     "turn1": turn1["name"] if turn1 else answer["name"],
                     "messages": msgs + [{"role": "assistant", "content": _code(answer["source"])}]})

    for role, copies in s["turn1_copies"].items():
        for kernel in (k[role] if role == "wrong" else [k[role]]):
            for _ in range(copies):
                row("eval_turn1", first, kernel)
    n_fast = round(s["turn2_copies"] * s["fast_share"])
    for t1 in (k["slow"], k["medium"]):
        fb = feedback_message(1, T, result=_result(verdicts, task.name, t1))
        ctx = first + [{"role": "assistant", "content": _code(t1["source"]), "weight": 0}, fb]
        for i in range(s["turn2_copies"]):
            row("eval_turn2", ctx, k["fast"] if i < n_fast else k["medium"], t1)
    for w in k["wrong"]:
        fb = feedback_message(1, T, result=_result(verdicts, task.name, w))
        ctx = first + [{"role": "assistant", "content": _code(w["source"]), "weight": 0}, fb]
        row("eval_turn2", ctx, k[s["after_wrong"]], w)
    return rows


def practice_skill(task, kernel: dict) -> dict:
    """A practice kernel's skill: its Example the whole kernel file (launch settings
    included: two variants may share a Triton function and differ in its launch), its tags
    the module's name first."""
    from davinci_kernel.agents.summary import snake_case

    skill = variant_skill(task, kernel, kernel["source"], example=kernel["source"].strip())
    skill["tags"] = [snake_case(module_name(task)), *skill["tags"]]
    return skill


def practice_rows(p: dict, task, kernels: list[dict], pool: list[tuple[str, dict]], verdicts: dict,
                  rng: random.Random, max_selected: int, max_new_skills: int) -> list[dict]:
    """Follow a skill, summarize, select, on one practice task. ``pool``: (task name, skill)
    of every practice kernel."""
    from davinci_kernel.agents.policy import first_messages
    from davinci_kernel.agents.selection import selection_messages
    from davinci_kernel.agents.summary import TOOL_NAME, summary_messages
    from davinci_kernel.records import Skill

    rows = []
    others = [s for t, s in pool if t != task.name]
    own = {k["name"]: practice_skill(task, k) for k in kernels}
    for k in kernels:
        for how in p["sft"]["follow"]:
            skills = {"no_skill": [], "own_skill": [own[k["name"]]],
                      "own_and_other": [own[k["name"]]] + ([rng.choice(others)] if others else [])}[how]
            rng.shuffle(skills)
            msgs = first_messages(task, [Skill.from_dict(s) for s in skills], "triton")
            rows.append({"task": task.name, "role": "policy", "kind": f"practice_{how}", "answer": k["name"],
                         "turn1": k["name"], "messages": msgs + [{"role": "assistant", "content": _code(k["source"])}]})
    speed = {k["name"]: _result(verdicts, task.name, k).speedup for k in kernels}
    best = max(kernels, key=lambda k: speed[k["name"]] or 0.0)
    firsts = [k for k in kernels if k is not best] or [best]
    for k in firsts:
        existing = [s["name"] for s in rng.sample(others, min(len(others), rng.randint(0, 3)))]
        msgs = summary_messages(task, k["source"], speed[k["name"]], best["source"], speed[best["name"]], 2, (),
                                existing, max_new_skills)
        answer = _tool(TOOL_NAME, {"think": f"the faster kernel does this: {best['what']}",
                                   "new_skills": [own[best["name"]]]})
        rows.append({"task": task.name, "role": "summary", "kind": "practice_summary", "answer": best["name"],
                     "turn1": k["name"], "messages": msgs + [{"role": "assistant", "content": answer}]})
    for i in range(p["sft"]["selection_per_task"]):
        mine = rng.sample(list(own.values()), min(len(own), 1 + rng.randrange(2))) if i % 2 == 0 else []
        cands = mine + rng.sample(others, min(len(others), max(0, rng.randint(2, 4) - len(mine))))
        if not cands:
            continue
        rng.shuffle(cands)
        picked = [{"name": s["name"], "reason": "its tags name this module"} for s in cands if s in mine]
        think = ("these skills are tagged with this module's name" if picked else
                 "no candidate is tagged with this module's name")
        msgs = selection_messages(task, [Skill.from_dict(s) for s in cands], max_selected)
        rows.append({"task": task.name, "role": "select", "kind": "practice_select",
                     "answer": ",".join(s["name"] for s in picked), "turn1": "",
                     "messages": msgs + [{"role": "assistant", "content": _tool(
                         "select_skills", {"think": think, "selected_skills": picked})}]})
    return rows


def sft_rows(p: dict, tasks: dict, cat: dict[str, list[dict]], verdicts: dict, max_selected: int = 3,
             max_new_skills: int = 2) -> list[dict]:
    """Every SFT conversation of the experiment. ``tasks``: name -> Task; ``verdicts``:
    (task, kernel name) -> the evaluator's result dict."""
    rng = random.Random(p["sft"]["seed"])
    rows = []
    for name in p["eval_tasks"]:
        rows += eval_rows(p, tasks[name], cat[name], verdicts)
    pool = [(name, practice_skill(tasks[name], k)) for name in p["practice_tasks"] for k in cat[name]]
    for name in p["practice_tasks"]:
        rows += practice_rows(p, tasks[name], cat[name], pool, verdicts, rng, max_selected, max_new_skills)
    return rows


def fast_turn1_violations(rows: list[dict], p: dict, cat: dict[str, list[dict]]) -> list[str]:
    """Rows of an evaluation task whose turn 1 is its fast variant or anything but its slow,
    medium or wrong ones, or whose prompt carries a skill: [] when the data are as the
    protocol says."""
    bad = []
    for i, r in enumerate(rows):
        if r["task"] not in p["eval_tasks"]:
            continue
        k = by_role(cat[r["task"]])
        allowed = {normalized(_code(v["source"])) for v in [k["slow"], k["medium"], *k["wrong"]]}
        turn1 = normalized(next(m["content"] for m in r["messages"] if m["role"] == "assistant"))
        if normalized(k["fast"]["source"]) in turn1:
            bad.append(f"row {i} ({r['task']}, {r['kind']}): turn 1 is the fast variant")
        elif turn1 not in allowed:
            bad.append(f"row {i} ({r['task']}, {r['kind']}): turn 1 is not a slow, medium or wrong variant")
        if r["role"] != "policy" or "## Skills from the library" in r["messages"][0]["content"]:
            bad.append(f"row {i} ({r['task']}, {r['kind']}): an evaluation task's row that is not a plain policy turn")
    return bad
