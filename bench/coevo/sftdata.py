"""The experiment's SFT data, and the guards run on them before training and in the tests.

``sft_rows`` builds the SFT conversations from the catalogue (``catalog.py``):

- RL tasks, turn 1 (no skills): slow, medium or a wrong variant, never the fast one; turn 2:
  after a slow or medium turn 1 and the evaluator's "correct, make it faster" feedback, the
  fast variant ``fast_share`` of the time, else the medium one; after a wrong turn 1 and its
  "incorrect" feedback, the medium one. An RL episode can so go slow -> fast and fire the
  summary; its fast form is never a first turn;
- held-out tasks: never (no row names them, no answer holds one of their kernels);
- practice pairs (a kernel lacking a technique, the kernel with it), across every
  technique: *apply* (the technique's skill in the system prompt, alone or beside a
  distractor, or with the lacking kernel given in the user message -> the kernel with it;
  no skill -> the lacking kernel), *summarize* (lacking -> with gives the technique's skill,
  its Example the technique's snippet, not the kernel), *select* (the technique's skill
  among distractors and the other techniques' skills is the pick: its trigger fits);
- a practice pair marked ``apply_only`` (a family's grid member, ``family.py``): the apply
  rows only;
- other practice tasks: turn 1 -> the built-in reference.

``violations`` is the guard: [] when the rows keep the three rules and the practice rows
are what they claim (the technique present in every taught Example and answer, absent from
every lacking kernel, every technique taught on enough practice tasks). Does not cover:
judging the kernels or training (``prepare.py``).
"""

from __future__ import annotations

import json
import random

from kernel_variants import normalized

from .catalog import admission_refusal, by_role, distractors, skill_example, technique_skill

SKILLS_HEADING = "## Skills from the library"


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


def _row(task, role: str, kind: str, msgs: list[dict], answer: str, answer_name: str, turn1: str = "",
         technique: str | None = None) -> dict:
    return {"task": task.name, "role": role, "kind": kind, "answer": answer_name, "turn1": turn1 or answer_name,
            "technique": technique, "messages": msgs + [{"role": "assistant", "content": answer}]}


# ----------------------------------------------------------------------------- RL tasks
def rl_rows(p: dict, task, kernels: list[dict], verdicts: dict) -> list[dict]:
    """Turn 1 never the fast variant; turn 2 the fast one only after "correct" feedback."""
    from davinci_kernel.agents.policy import feedback_message, first_messages

    s, T = p["sft"], p["rl"]["turns"]
    k = by_role(kernels)
    first = first_messages(task, (), "triton")
    rows = []
    for role, copies in s["rl_turn1_copies"].items():
        for kernel in (k[role] if role == "wrong" else [k[role]]):
            rows += [_row(task, "policy", "rl_turn1", first, _code(kernel["source"]), kernel["name"])] * copies
    n_fast = round(s["rl_turn2_copies"] * s["fast_share"])
    for t1 in (k["slow"], k["medium"]):
        fb = feedback_message(1, T, result=_result(verdicts, task.name, t1))
        ctx = first + [{"role": "assistant", "content": _code(t1["source"]), "weight": 0}, fb]
        for i in range(s["rl_turn2_copies"]):
            ans = k["fast"] if i < n_fast else k["medium"]
            rows.append(_row(task, "policy", "rl_turn2", ctx, _code(ans["source"]), ans["name"], t1["name"]))
    for w in k["wrong"]:
        fb = feedback_message(1, T, result=_result(verdicts, task.name, w))
        ctx = first + [{"role": "assistant", "content": _code(w["source"]), "weight": 0}, fb]
        ans = k[s["after_wrong"]]
        rows.append(_row(task, "policy", "rl_turn2", ctx, _code(ans["source"]), ans["name"], w["name"]))
    return rows


# ----------------------------------------------------------------------------- practice
def given_lacking(msgs: list[dict], lacking: str) -> list[dict]:
    """The first messages with a correct kernel that lacks the technique given in the user's."""
    user = dict(msgs[1], content=msgs[1]["content"].rstrip() + "\n\nA correct kernel for it that does not use the "
                "technique of the skill yet:\n" + _code(lacking))
    return [msgs[0], user]


def practice_rows(p: dict, task, kernels: list[dict], verdicts: dict, skills: dict[str, dict],
                  noise: list[dict], rng: random.Random, max_selected: int, max_new_skills: int) -> list[dict]:
    """Apply, summarize and select on one practice pair. ``skills``: technique id -> its
    skill; ``noise``: the distractor skills."""
    from davinci_kernel.agents.policy import first_messages
    from davinci_kernel.agents.selection import selection_messages
    from davinci_kernel.agents.summary import TOOL_NAME, summary_messages
    from davinci_kernel.records import Skill

    s = p["sft"]["apply_copies"]
    k = by_role(kernels)
    tech, w = k["with"]["technique"], k["with"]
    mine = skills[tech]
    rows = []
    for lk in k["lacking"]:
        def add(kind: str, msgs: list[dict], ans: dict, n: int) -> None:
            rows.extend(_row(task, "policy", kind, msgs, _code(ans["source"]), ans["name"], technique=tech)
                        for _ in range(n))

        add("practice_apply_skill_alone", first_messages(task, [Skill.from_dict(mine)]), w, s["skill_alone"])
        for _ in range(s["skill_and_distractor"]):
            pair = [mine, rng.choice(noise)]
            rng.shuffle(pair)
            add("practice_apply_skill_and_distractor", first_messages(task, [Skill.from_dict(x) for x in pair]), w, 1)
        add("practice_apply_given_lacking", given_lacking(first_messages(task, [Skill.from_dict(mine)]), lk["source"]),
            w, s["given_lacking"])
        add("practice_no_skill", first_messages(task), lk, s["no_skill"])
        if p["practice_pairs"][task.name].get("apply_only"):
            continue  # a family's grid member: the apply rows only (bench/coevo/family.py)
        for c in range(p["sft"]["summary_copies"]):
            # the library's names as the probe and the arms list them: every other copy the
            # whole distractor library (shuffled), the rest a random part of it; a third of
            # the copies name a distractor as the skill the episode used (an arm's scheme)
            names = [x["name"] for x in noise]
            rng.shuffle(names)
            existing = names if c % 2 == 0 else names[:rng.randint(0, len(names))]
            used = [Skill.from_dict(rng.choice(noise))] if c % 3 == 2 else []
            msgs = summary_messages(task, lk["source"], _result(verdicts, task.name, lk).speedup, w["source"],
                                    _result(verdicts, task.name, w).speedup, 2, used, existing, max_new_skills)
            answer = _tool(TOOL_NAME, {"think": f"the faster kernel applies one technique: {mine['description']} "
                                                "The skill keeps the technique, not the kernel.",
                                       "new_skills": [mine]})
            rows.append(_row(task, "summary", "practice_summary", msgs, answer, tech, lk["name"], tech))
    lo, hi = p["sft"]["select_candidates"]
    others = [x for t, x in skills.items() if t != tech]
    for _ in range(0 if p["practice_pairs"][task.name].get("apply_only") else p["sft"]["select_per_pair"]):
        pool = noise + others
        cands = [mine] + rng.sample(pool, min(len(pool), rng.randint(lo, hi) - 1))
        rng.shuffle(cands)
        msgs = selection_messages(task, [Skill.from_dict(x) for x in cands], max_selected)
        answer = _tool("select_skills", {"think": "one candidate's trigger fits this module; the others do not",
                                         "selected_skills": [{"name": mine["name"], "reason": mine["description"]}]})
        rows.append(_row(task, "select", "practice_select", msgs, answer, mine["name"], "", tech))
    return rows


def sft_rows(p: dict, tasks: dict, cat: dict[str, list[dict]], verdicts: dict,
             noise: list[dict] | None = None) -> list[dict]:
    """Every SFT conversation of the experiment. ``tasks``: name -> Task; ``verdicts``:
    (task, kernel name) -> the evaluator's result dict."""
    from davinci_kernel.agents.policy import first_messages

    max_selected, max_new_skills = p["rl"]["max_selected"], p["rl"]["max_new_skills"]
    rng = random.Random(p["sft"]["seed"])
    noise = distractors() if noise is None else noise
    skills = {t: technique_skill(t) for t in p["techniques"]}
    rows = []
    for name in p["rl_tasks"]:
        rows += rl_rows(p, tasks[name], cat[name], verdicts)
    for name in p["practice_tasks"]:
        if name in p["practice_pairs"]:
            rows += practice_rows(p, tasks[name], cat[name], verdicts, skills, noise, rng, max_selected,
                                  max_new_skills)
        else:
            ref = cat[name][0]
            rows += [_row(tasks[name], "policy", "practice_reference", first_messages(tasks[name]),
                          _code(ref["source"]), ref["name"])] * p["sft"]["reference_copies"]
    return rows


# ----------------------------------------------------------------------------- guards
def _code_of(text: str) -> str | None:
    """The first fenced code block of ``text``."""
    from davinci_kernel.agents.policy import extract_code

    return extract_code(text).code


def _answer_skills(row: dict) -> list[dict]:
    from davinci_kernel.agents.summary import parse_summary

    return [s.export_dict() for s in parse_summary(row["messages"][-1]["content"], 8).skills]


def violations(rows: list[dict], p: dict, cat: dict[str, list[dict]]) -> list[str]:
    """What in ``rows`` breaks the SFT rules: [] when they hold.

    1. an RL task's first assistant turn is its slow, medium or a wrong variant (never the
       fast one), in a plain policy prompt without skills;
    2. no row is of a held-out task, names one, or holds one of its kernels;
    3. every practice skill's Example (in a prompt or a summary's answer) carries its
       technique, is no whole kernel and passes the admission filter against the kernel it
       was summarized from; every answer of an apply row carries it; every
       lacking kernel lacks it; a selection picks exactly the skill of the row's technique;
       every technique is taught on at least ``min_pairs`` practice tasks."""
    from .techniques import technique_present

    bad = []
    held = {t: [normalized(k["source"]) for k in cat[t]] for t in p["heldout_tasks"]}
    for i, r in enumerate(rows):
        where = f"row {i} ({r['task']}, {r['kind']})"
        text = normalized(" ".join(m["content"] for m in r["messages"]))
        if r["task"] in held:
            bad.append(f"{where}: a held-out task in the SFT data")
        for t, srcs in held.items():
            if t in text or any(s in text for s in srcs):
                bad.append(f"{where}: names the held-out task {t} or holds one of its kernels")
        if r["task"] in p["rl_tasks"]:
            k = by_role(cat[r["task"]])
            allowed = {normalized(_code(v["source"])) for v in [k["slow"], k["medium"], *k["wrong"]]}
            turn1 = normalized(next(m["content"] for m in r["messages"] if m["role"] == "assistant"))
            if normalized(k["fast"]["source"]) in turn1:
                bad.append(f"{where}: turn 1 is the fast variant")
            elif turn1 not in allowed:
                bad.append(f"{where}: turn 1 is not a slow, medium or wrong variant")
            if r["role"] != "policy" or SKILLS_HEADING in r["messages"][0]["content"]:
                bad.append(f"{where}: an RL task's row that is not a plain policy turn")
        tech = r.get("technique")
        if not tech:
            continue
        if r["kind"].startswith("practice_apply"):
            example = skill_example(technique_skill(tech))
            shown = SKILLS_HEADING in r["messages"][0]["content"] and normalized(example) in normalized(
                r["messages"][0]["content"])
            if not shown or not technique_present(tech, example):
                bad.append(f"{where}: the prompt's skill does not show the technique {tech}")
            if not technique_present(tech, _code_of(r["messages"][-1]["content"]) or ""):
                bad.append(f"{where}: the answer does not apply the technique {tech}")
        if r["kind"] == "practice_summary":
            best = _code_of(r["messages"][1]["content"].split("## Best attempt")[-1])
            for s in _answer_skills(r):
                ex = skill_example(s)
                if not technique_present(tech, ex) or "class ModelNew" in ex:
                    bad.append(f"{where}: the skill's Example is not the technique's snippet")
                elif (why := admission_refusal(s, best)) is not None:
                    bad.append(f"{where}: the admission filter refuses the taught skill ({why})")
        if r["kind"] == "practice_select":
            picked = json.loads(r["messages"][-1]["content"].split("\n")[1])["arguments"]["selected_skills"]
            if [x["name"] for x in picked] != [tech]:
                bad.append(f"{where}: the pick is not the skill of the technique {tech}")
    for task, pair in p["practice_pairs"].items():
        if task not in p["practice_tasks"]:
            continue
        k = by_role(cat[task])
        for lk in k["lacking"]:
            if technique_present(pair["technique"], lk["source"]):
                bad.append(f"{task}: the lacking kernel {lk['name']} already carries {pair['technique']}")
        if not technique_present(pair["technique"], k["with"]["source"]):
            bad.append(f"{task}: the kernel {k['with']['name']} does not carry {pair['technique']}")
    for tech in p["techniques"]:
        n = sum(1 for t, pair in p["practice_pairs"].items() if pair["technique"] == tech and t in p["practice_tasks"])
        if n < p["sft"]["min_pairs"]:
            bad.append(f"the technique {tech} is taught on {n} practice task(s), fewer than {p['sft']['min_pairs']}")
    return bad
