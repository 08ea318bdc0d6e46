"""The experiment's result: the JSON, the plots, the table, the tests and the docs' verdicts.

``collect`` reads a run folder into one document: ``protocol`` (run.json's: ``version`` 2,
``practice_tasks``, ``rl_tasks``, ``heldout_tasks``, ...), ``rows`` (one per arm, seed and
step: ``arm``, ``seed``, ``step``, ``admitted``, ``gpu``, ...), ``runs`` (how each arm x seed
ended, its card, its final held-out evaluation), ``probes`` (every probe's record),
``roles`` (the role records the arms relied on), ``variants``, ``sft``, and ``tests`` (the
five pre-registered tests, ``prereg.run_all``). ``card_name`` names the file after the
cards the rows ran on (``h100``, ``h200``, or ``h100_h200``). ``plot_run`` draws one PNG per
arm and seed over steps: library size (admitted skills), share of schemes with an
admitted skill, and turn-1 Fast_1.2 on the held-out tasks. ``fill_docs`` writes the verdict
section of ``docs/coevolution.md`` between its markers. It judges, it never tunes.
"""

from __future__ import annotations

import io
from pathlib import Path

from kernel_variants import read_json, write_json

from davinci_kernel.files import write_atomic

from . import prereg
from .protocol import ARMS
from .roles import card_kind

BEGIN, END = "<!-- verdicts:begin -->", "<!-- verdicts:end -->"


def rows_files(d: Path) -> list[Path]:
    return sorted(f for f in (Path(d) / "rows").glob("*-s*.json") if ".attempt-" not in f.name)


def read_probes(d: Path) -> list[dict]:
    from davinci_kernel.files import read_jsonl

    path = Path(d) / "probes.jsonl"
    return read_jsonl(path) if path.is_file() else []


def with_earlier_probes(doc: dict, old: dict | None) -> dict:
    """``doc`` with the probes of an earlier result file of the same card that it lacks (a
    no-go sends the next probe to a new run folder; the file keeps every probe), by date."""
    if not old or old.get("card") != doc["card"]:
        return doc
    seen = {(x["date"], x["card"]) for x in doc["probes"]}
    earlier = [x for x in old.get("probes", []) if (x["date"], x["card"]) not in seen]
    return dict(doc, probes=sorted(earlier + doc["probes"], key=lambda x: x["date"]))


def card_name(gpus) -> str:
    """The result file's card: one kind, or the kinds joined (h100_h200)."""
    kinds = sorted({card_kind(g) for g in gpus})
    return "_".join(kinds) if kinds else "none"


def collect(d: Path) -> dict:
    d = Path(d)
    plan = read_json(d / "run.json")
    if plan is None:
        raise FileNotFoundError(f"no run.json in {d}")
    p = plan["protocol"]
    docs = [read_json(f) for f in rows_files(d)]
    docs.sort(key=lambda x: (ARMS.index(x["arm"]) if x["arm"] in ARMS else 99, x["seed"]))
    rows = [dict(r, gpu=x["gpu"]) for x in docs for r in x["steps"]]
    runs = [{"arm": x["arm"], "seed": x["seed"], "status": x["status"], "stopped": x.get("stopped"),
             "steps": len(x["steps"]), "seconds": x.get("seconds"), "gpu": x["gpu"], "card": card_kind(x["gpu"]),
             "date": x["date"], "calls": x.get("calls", []), "final": x.get("final")} for x in docs]
    finals: dict = {}
    for x in docs:
        if x.get("final"):
            finals.setdefault(x["arm"], {})[x["seed"]] = x["final"]
    roles = [read_json(f) for f in sorted((d / "roles").glob("*.json"))] if (d / "roles").is_dir() else []
    probes = read_probes(d)
    card = card_name(x["gpu"] for x in docs) if docs else "_".join(sorted({x["card"] for x in probes})) or "none"
    return {"card": card, "protocol": p, "rows": rows, "runs": runs, "probes": probes, "tests": prereg.run_all(rows, finals, p),
            "roles": [{k: r[k] for k in ("card", "gpu", "date", "ok", "checks")} for r in roles],
            "variants": read_json(d / "variants.json"), "sft": read_json(d / "sft.json")}


def by_run(rows: list[dict]) -> dict[tuple[str, int], list[dict]]:
    """(arm, seed) -> its rows in step order."""
    out: dict = {}
    for r in rows:
        out.setdefault((r["arm"], r["seed"]), []).append(r)
    for rs in out.values():
        rs.sort(key=lambda r: r["step"])
    return out


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def describe(tests: list[dict]) -> list[str]:
    """One line per test: PASS/FAIL, its name, numbers and CI (or why it could not run)."""
    lines = []
    for t in tests:
        nums = ", ".join(f"{k} {_fmt(v)}" for k, v in t["numbers"].items() if not isinstance(v, dict))
        extra = f" (margin {_fmt(t['margin'])}, 95% CI {_fmt(t['ci95'])})" if t["ci95"] else ""
        lines.append(f"{t['verdict'].upper():4s}  {t['name']}: {nums or t.get('why', '')}{extra}")
    return lines


def table(doc: dict) -> list[str]:
    """Per arm and seed: steps, status, admitted skills, last-step turn-1 Fast_1.2 on the RL
    tasks, the final held-out Fast_1.2 with the library (and without, where measured)."""
    lines = [f"{'arm':18s} {'seed':>4s} {'card':>5s} {'steps':>5s} {'status':>8s} {'admitted':>8s} "
             f"{'RL turn1 F1.2':>13s} {'held-out on':>11s} {'off':>6s} {'helpful pick':>12s}"]
    rows = by_run(doc["rows"])
    for run in doc["runs"]:
        rs = rows.get((run["arm"], run["seed"]), [])
        f = run.get("final") or {}
        on, off = f.get("on") or {}, f.get("off") or {}
        lines.append(f"{run['arm']:18s} {run['seed']:4d} {run['card']:>5s} {len(rs):5d} {run['status']:>8s} "
                     f"{sum(r['admitted'] for r in rs):8d} {rs[-1]['turn1_fast_1.2'] if rs else 0:13.3f} "
                     f"{_fmt(on.get('turn1_fast_1.2', '-')):>11s} {_fmt(off.get('turn1_fast_1.2', '-')):>6s} "
                     f"{_fmt(on.get('helpful_pick_share', '-')):>12s}")
    return lines


def plot_run(rows: list[dict], title: str, path: Path) -> None:
    """Library size, share of schemes with an admitted skill, held-out turn-1 Fast_1.2."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = (("library_size", "library size (admitted skills)"),
            ("admitted_share_of_schemes", "share of schemes with an admitted skill"),
            ("heldout_turn1_fast_1.2", "held-out turn-1 Fast_1.2"))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for ax, (key, name) in zip(axes, keys):
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            ax.plot([s for s, _ in pts], [v for _, v in pts], marker="o")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, buf.getvalue())


def write(doc: dict, json_path: Path) -> list[Path]:
    """The JSON, and one PNG per arm and seed beside it (``<stem>_<arm>-s<seed>.png``)."""
    write_json(json_path, doc)
    pngs = []
    for (arm, seed), rs in by_run(doc["rows"]).items():
        png = json_path.with_name(f"{json_path.stem}_{arm}-s{seed}.png")
        plot_run(rs, f"{arm}, seed {seed} ({doc['card']})", png)
        pngs.append(png)
    return pngs


def verdict_section(doc: dict, json_name: str) -> str:
    """The markdown between the docs' markers: the probes, the runs and the five tests."""
    out = [f"Results: `bench/results/{json_name}` (card: {doc['card']}).", ""]
    if doc["probes"]:
        out += ["| probe date | card | summary share | greedy with skill fast | no-skill fast | go |",
                "|---|---|---|---|---|---|"]
        out += [f"| {x['date']} | {x['card']} | {x['summary_share']:.2f} | {x['greedy_with_skill_fast_share']:.2f} | "
                f"{x['noskill_fast_share']:.2f} | {'go' if x['go'] else 'NO-GO'} |" for x in doc["probes"]]
        out.append("")
    else:
        out += ["No probe has run yet.", ""]
    ran = sorted({(r["arm"], r["seed"]) for r in doc["rows"]})
    out += [f"Arm x seed runs with rows: {', '.join(f'{a} s{s}' for a, s in ran) or 'none'}.", ""]
    out += ["| test | verdict | margin | 95 % CI | numbers |", "|---|---|---|---|---|"]
    for t in doc["tests"]:
        nums = "; ".join(f"{k} {_fmt(v)}" for k, v in t["numbers"].items() if not isinstance(v, dict))
        verdict = t["verdict"] if "why" not in t else f"{t['verdict']} ({t['why']})"
        out.append(f"| {t['name']} | {verdict} | {_fmt(t['margin'])} | {_fmt(t['ci95']) if t['ci95'] else '-'} | "
                   f"{nums or '-'} |")
    return "\n".join(out)


def fill_docs(doc: dict, json_name: str, page: Path) -> bool:
    """Replace the verdict section of ``page`` (between its markers); False when it has none."""
    text = page.read_text() if page.is_file() else ""
    if BEGIN not in text or END not in text:
        return False
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    write_atomic(page, head + BEGIN + "\n" + verdict_section(doc, json_name) + "\n" + END + tail)
    return True
