"""The margin rule, enforced: the variants of every RL and held-out task keep their roles
on this machine, or nothing starts.

With the protocol's p and m: ``fast`` correct and at least p*m times eager, ``slow`` and
``medium`` correct and at most p/m times eager, every ``wrong`` judged incorrect
(``role_checks``, a pure function of the judged table). A check is recorded in
``DIR/roles/<card>-<UTC day>.json`` (``card``: h100, h200, or the device's name) with the
verdicts it rests on; ``ensure`` reuses the record of this card kind and day, judges the
variants afresh when there is none, and raises ``RoleCheckFailed`` (one line: the first
problem; the command exits 2 before it starts anything) when the roles fail. The
``--tiny`` protocol does not enforce it (a CPU times nothing). Does not cover: judging
(``davinci_kernel.evaluate``).
"""

from __future__ import annotations

import datetime
from pathlib import Path

from kernel_variants import gpu_name, read_json, write_json

from .runner import RunError


class RoleCheckFailed(RunError):
    """The role checks fail on this machine today: nothing was started."""


def card_kind(name: str | None = None) -> str:
    """'h100', 'h200', 'cpu', or the device's name in lower case with underscores."""
    name = gpu_name() if name is None else name
    for kind in ("H200", "H100"):
        if kind in name.upper():
            return kind.lower()
    return "cpu" if name == "cpu" else "_".join(name.lower().split())


def role_checks(p: dict, table: list[dict]) -> list[dict]:
    """Per RL and held-out task: {task, speedups, ok, problems} under the margin rule.
    ``table``: {task, variant, role, correct, speedup} per judged kernel."""
    rule = p["margin_rule"]
    out = []
    for task in list(p["rl_tasks"]) + list(p["heldout_tasks"]):
        rows = [r for r in table if r["task"] == task]
        k = {r["role"]: r for r in rows if r["role"] in ("slow", "medium", "fast")}
        problems = []
        if len(k) < 3:
            problems.append("a slow, medium or fast variant was not judged")
        sp = {role: (r["speedup"] if r["correct"] else None) for role, r in k.items()}
        for role, r in k.items():
            if not r["correct"]:
                problems.append(f"{role} {r['variant']} judged incorrect")
            elif r["speedup"] is None:
                problems.append(f"{role} {r['variant']} not timed (no GPU)")
            elif role == "fast" and r["speedup"] < rule["fast_min"]:
                problems.append(f"fast {r['variant']} {r['speedup']:.2f}x < {rule['fast_min']}x")
            elif role != "fast" and r["speedup"] > rule["slow_medium_max"]:
                problems.append(f"{role} {r['variant']} {r['speedup']:.2f}x > {rule['slow_medium_max']}x")
        problems += [f"wrong {r['variant']} judged correct" for r in rows if r["role"] == "wrong" and r["correct"]]
        out.append({"task": task, "speedups": sp, "ok": not problems, "problems": problems})
    return out


def table_of(cat: dict, verdicts: dict, tasks) -> list[dict]:
    """The judged kernels of ``tasks``: {task, variant, role, correct, speedup, error_kind}."""
    return [{"task": t, "variant": k["name"], "role": k["role"], "correct": bool(verdicts[(t, k["name"])]["correct"]),
             "speedup": verdicts[(t, k["name"])]["speedup"], "error_kind": verdicts[(t, k["name"])].get("error_kind")}
            for t in tasks for k in cat[t] if (t, k["name"]) in verdicts]


def record_path(d: Path, card: str, day: str | None = None) -> Path:
    day = day or datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    return Path(d) / "roles" / f"{card}-{day}.json"


def write_record(p: dict, d: Path, cat: dict, verdicts: dict, sources: dict, card: str | None = None) -> dict:
    """The role checks of these verdicts ((task, name) -> result dict), recorded for this
    card and day with the verdicts and sources they rest on."""
    card = card or card_kind()
    tasks = list(p["rl_tasks"]) + list(p["heldout_tasks"])
    checks = role_checks(p, table_of(cat, verdicts, tasks))
    rec = {"card": card, "gpu": gpu_name(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), "rule": p["margin_rule"], "ok": all(c["ok"] for c in checks), "checks": checks,
        "verdicts": [{"task": t, "variant": n, "source": sources[(t, n)], "result": r}
                     for (t, n), r in verdicts.items() if t in tasks]}
    write_json(record_path(d, card), rec)
    return rec


def first_problem(rec: dict) -> str:
    bad = next(c for c in rec["checks"] if not c["ok"])
    return (f"the variant roles fail on this {rec['card']} ({rec['date'][:10]}): {bad['task']}: "
            f"{bad['problems'][0]}; nothing was started")


def ensure(p: dict, d: Path, judge_variants, echo=print) -> dict | None:
    """This card's and day's role record, made when there is none (``judge_variants()`` ->
    (cat, {(task, variant): result dict}) judges the RL and held-out variants afresh);
    ``RoleCheckFailed`` when it fails. None when the protocol does not enforce the rule."""
    if not p["margin_rule"]["enforce"]:
        return None
    card = card_kind()
    rec = read_json(record_path(d, card))
    if rec is None:
        echo(f"role checks: no record for this {card} today; judging the RL and held-out variants")
        cat, verdicts = judge_variants()
        rec = write_record(p, d, cat, verdicts, {(t, k["name"]): k["source"] for t, ks in cat.items() for k in ks
                                                 if (t, k["name"]) in verdicts}, card)
    for c in rec["checks"]:
        echo(f"{c['task']}: roles {'hold' if c['ok'] else 'FAIL: ' + '; '.join(c['problems'])}")
    if not rec["ok"]:
        raise RoleCheckFailed(first_problem(rec))
    return rec


def judge_variants(p: dict, d: Path, evaluator):
    """(the catalogue, the fresh verdicts of every RL and held-out variant)."""
    from .catalog import catalogue, load_tasks

    cat = catalogue(p)
    names = list(p["rl_tasks"]) + list(p["heldout_tasks"])
    tasks = {t.name: t for t in load_tasks(names, d, "suite-roles")}
    items = [(t, k) for t in names for k in cat[t]]
    got = evaluator.evaluate_many([(tasks[t], k["source"]) for t, k in items])
    return cat, {(t, k["name"]): r.to_dict() for (t, k), r in zip(items, got)}
