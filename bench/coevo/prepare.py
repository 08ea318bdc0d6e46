"""``prepare``: everything the probe and the arms start from, in the run folder.

In order, each kept when it is already there (a rerun continues, never overwrites):
``run.json`` (the protocol and every arm x seed's full config; a run folder made under
another protocol version, or with another protocol, is refused naming the difference),
the verdicts of every kernel the experiment uses but the apply-only practice families
grid (``verdicts.jsonl``, one line per kernel
as it is judged; ``variants.json``, the table and the role checks), the role record of
this card and day (``roles/``; when the roles fail under the margin rule the command stops
there, before any SFT), the SFT data (``sft.jsonl``, refused when ``sftdata.violations``
finds a row that breaks the rules), the random-init base model, and the SFT model
(``sft/model``; an interrupted SFT resumes from its last epoch). ``export`` copies what the arms need into another folder (the device
call's output folder), within the 64 MiB a run folder may carry.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from kernel_variants import base_model, parameters, read_json, sft_config, write_json

from . import roles
from .catalog import by_role, catalogue, load_tasks
from .protocol import eval_overrides, run_plan, version_difference
from .runner import RunError
from .sftdata import sft_rows, violations

EXPORT = ("run.json", "variants.json", "verdicts.jsonl", "roles", "sft.jsonl", "sft.json", "sft/model")


def eval_config(p: dict, d: Path):
    from davinci_kernel.config import load_config

    from .protocol import ROOT

    return load_config(ROOT / "configs" / "tiny-cpu.yaml", eval_overrides(p, d)).eval


def write_plan(p: dict, d: Path) -> dict:
    import json

    plan = json.loads(json.dumps(run_plan(p, d)))  # as it reads back
    old = read_json(d / "run.json")
    if old is not None and old != plan:
        why = version_difference(old.get("protocol", {}), plan["protocol"]) or "another arm config"
        raise RunError(f"{d / 'run.json'} was made under {why}: use a new run folder")
    if old is None:
        write_json(d / "run.json", plan)
    return plan


def check_run_folder(p: dict, d: Path) -> dict:
    """run.json of a prepared run folder made under this protocol, else RunError naming
    the difference."""
    from .protocol import recorded_protocol

    plan = read_json(d / "run.json")
    if plan is None:
        raise RunError(f"no run.json in {d}: run the prepare command first")
    why = version_difference(plan.get("protocol", {}), recorded_protocol(p))
    if why:
        raise RunError(f"{d / 'run.json'} was made under {why}: use a new run folder")
    return plan


def read_verdicts(d: Path) -> dict:
    """(task, kernel name) -> result dict, from ``verdicts.jsonl``."""
    from davinci_kernel.files import read_jsonl

    path = d / "verdicts.jsonl"
    return {(r["task"], r["variant"]): r for r in (read_jsonl(path) if path.is_file() else [])}


def judged_kernels(p: dict, cat: dict) -> dict:
    """The catalogue less the apply-only practice pairs (a family's grid members: no summary
    states their speed; the tests judge them on the CPU)."""
    return {t: ks for t, ks in cat.items() if not p["practice_pairs"].get(t, {}).get("apply_only")}


def judge(p: dict, d: Path, cat: dict, tasks: dict, evaluator, echo=print) -> dict:
    """Judge every kernel not judged yet (``judged_kernels``); their table in ``variants.json``."""
    from davinci_kernel.files import append_jsonl
    from davinci_kernel.rl.progress import bar

    have = read_verdicts(d)
    cat = judged_kernels(p, cat)
    todo = [(t, k) for t, ks in cat.items() for k in ks if (t, k["name"]) not in have]
    if todo:
        with bar(len(todo), 0, "kernels judged") as shown:
            done = [0]

            def one(i, r):
                t, k = todo[i]
                append_jsonl(d / "verdicts.jsonl", [{"task": t, "variant": k["name"], "source": k["source"],
                                                     "result": r.to_dict()}])
                done[0] += 1
                shown(done[0], f"{t} {k['name']}")

            evaluator.evaluate_many([(tasks[t], k["source"]) for t, k in todo], progress=one)
        have = read_verdicts(d)
    table = [{"task": t, "variant": k["name"], "role": k["role"], "correct": have[(t, k["name"])]["result"]["correct"],
              "speedup": have[(t, k["name"])]["result"]["speedup"],
              "error_kind": have[(t, k["name"])]["result"]["error_kind"],
              "flags": have[(t, k["name"])]["result"]["flags"]} for t, ks in cat.items() for k in ks]
    write_json(d / "variants.json", {"variants": table, "role_checks": roles.role_checks(p, table)})
    return {k: v["result"] for k, v in have.items()}


def prepare(p: dict, d: Path, evaluator, budget_s: float = 0.0, t_start: float | None = None, echo=print) -> None:
    from davinci_kernel.files import jsonl_text, read_jsonl, write_atomic
    from davinci_kernel.rl.sft import train_sft

    t_start = t_start if t_start is not None else time.monotonic()
    d.mkdir(parents=True, exist_ok=True)
    write_plan(p, d)
    cat = catalogue(p)
    names = list(p["rl_tasks"]) + list(p["heldout_tasks"]) + list(p["practice_tasks"])
    tasks = {t.name: t for t in load_tasks(names, d)}
    verdicts = judge(p, d, cat, tasks, evaluator, echo)
    if p["margin_rule"]["enforce"]:
        checked = [t for t in names if t in p["rl_tasks"] or t in p["heldout_tasks"]]
        rec = roles.write_record(p, d, cat, {(t, k["name"]): verdicts[(t, k["name"])] for t in checked for k in cat[t]},
                                 {(t, k["name"]): k["source"] for t in checked for k in cat[t]})
        for c in rec["checks"]:
            echo(f"{c['task']}: roles {'hold' if c['ok'] else 'FAIL: ' + '; '.join(c['problems'])}")
        if not rec["ok"]:
            raise roles.RoleCheckFailed(roles.first_problem(rec))
    rows = sft_rows(p, tasks, cat, verdicts)
    bad = violations(rows, p, cat)
    if bad:
        raise RunError(f"the SFT data break the protocol ({len(bad)} problems), first: {bad[0]}")
    text = jsonl_text(rows)
    if (d / "sft.jsonl").is_file() and (d / "sft.jsonl").read_text() != text:
        raise RunError(f"{d / 'sft.jsonl'} differs from the data this protocol and these verdicts give: "
                       "use a new run folder")
    data = write_atomic(d / "sft.jsonl", text)
    if (d / "sft" / "model").is_dir():
        echo(f"sft: the model in {d / 'sft' / 'model'} is kept")
        return
    s = p["sft"]
    base = d / "base"
    if not (base / "config.json").is_file():
        base_model(base, p["model"], s["seed"], [k["source"] for ks in cat.values() for k in ks])
    left = budget_s - (time.monotonic() - t_start) if budget_s else 0.0
    if budget_s and left < 30:
        raise RunError(f"the prepare budget ({budget_s:g} s) leaves no time for SFT; run prepare again")
    cfg = sft_config(base, data, s["epochs"], s["lr"], max(left - 45, 1) if budget_s else 0, max_per_task=100_000)
    t0 = time.monotonic()
    got = train_sft(cfg, out=str(d / "sft"), echo=echo, resume=(d / "sft" / "checkpoints").is_dir())
    ms = read_jsonl(d / "sft" / "metrics.jsonl")
    write_json(d / "sft.json", {
        "examples": len(rows), "kept": got["samples"], "by_kind": _count(r["kind"] for r in rows),
        "rl_turn1_answers": _count(f"{r['task']}:{_role(cat, r)}" for r in rows if r["kind"] == "rl_turn1"),
        "rl_turn2_answers": _count(f"{r['task']}:{_role(cat, r)}" for r in rows if r["kind"] == "rl_turn2"),
        "practice_by_technique": _count(f"{r['technique']}:{r['kind']}" for r in rows if r.get("technique")),
        "optimizer_steps": got["steps"], "epochs": got["epochs"], "epochs_asked": s["epochs"], "lr": s["lr"],
        "seconds": round(time.monotonic() - t0, 1), "loss_first": ms[0]["loss"] if ms else None,
        "loss_last": got["loss"], "parameters": parameters(d / "sft" / "model"),
        "longest_answer_chars": max(len(r["messages"][-1]["content"]) for r in rows)})
    shutil.rmtree(d / "sft" / "checkpoints", ignore_errors=True)  # the model is saved; resuming needs them no more
    echo(f"sft: {len(rows)} examples, {got['epochs']} epochs, {got['steps']} steps, loss "
         f"{ms[0]['loss'] if ms else 0:.3f} -> {got['loss']:.4f}")


def _count(xs) -> dict:
    out: dict = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return out


def _role(cat: dict, row: dict) -> str:
    k = by_role(cat[row["task"]])
    for role in ("slow", "medium", "fast"):
        if k[role]["name"] == row["answer"]:
            return role
    return "wrong"


def export(d: Path, dest: Path) -> None:
    """Copy what the arms start from (``EXPORT``) into ``dest``."""
    for name in EXPORT:
        src = d / name
        if not src.exists():
            raise RunError(f"{src} is missing: run prepare to the end first")
        if src.is_dir():
            shutil.copytree(src, dest / name, dirs_exist_ok=True)
        else:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
