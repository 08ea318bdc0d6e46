"""The experiment's result: the JSON, the plot, the table, and the success criteria.

``collect`` reads every arm x seed's rows file of a run folder into one document
``{"gpu", "torch", "date", "protocol", "rows", "runs", "variants", "sft", "success"}`` (one
row per arm, seed and step; ``runs`` says how each arm x seed ended and holds the final
library on/off comparison; ``variants`` the kernels as ``prepare`` judged them, with the
role checks; ``sft`` what the SFT did). ``success`` evaluates the protocol's criteria over such a document and
reports each as pass or fail with its numbers; it judges, it never tunes. ``plot`` draws
library size and turn-1 Fast_1.2 per step for every arm (mean over seeds, min-max band).
"""

from __future__ import annotations

import io
from pathlib import Path

from kernel_variants import read_json, write_json

from davinci_kernel.files import write_atomic

from .protocol import ARMS


def rows_files(d: Path) -> list[Path]:
    return sorted(f for f in (Path(d) / "rows").glob("*-s*.json") if ".attempt-" not in f.name)


def collect(d: Path) -> dict:
    plan = read_json(Path(d) / "run.json")
    if plan is None:
        raise FileNotFoundError(f"no run.json in {d}")
    docs = [read_json(f) for f in rows_files(d)]
    if not docs:
        raise FileNotFoundError(f"no rows in {Path(d) / 'rows'}: run an arm first")
    docs.sort(key=lambda x: (ARMS.index(x["arm"]) if x["arm"] in ARMS else 99, x["seed"]))
    rows = [r for doc in docs for r in doc["steps"]]
    runs = [{"arm": x["arm"], "seed": x["seed"], "status": x["status"], "stopped": x.get("stopped"),
             "steps": len(x["steps"]), "seconds": x.get("seconds"), "gpu": x["gpu"], "date": x["date"],
             "calls": x.get("calls", []), "final": x.get("final")} for x in docs]
    out = {"gpu": _one(x["gpu"] for x in docs), "torch": _one(x["torch"] for x in docs),
           "date": _one(x["date"] for x in docs), "protocol": plan["protocol"], "rows": rows, "runs": runs,
           "variants": read_json(Path(d) / "variants.json"), "sft": read_json(Path(d) / "sft.json")}
    out["success"] = success(out)
    return out


def _one(values) -> str:
    vs = sorted(set(values))
    return vs[0] if len(vs) == 1 else " / ".join(vs)


def by_arm(doc: dict) -> dict[str, dict[int, list[dict]]]:
    """arm -> seed -> its rows in step order."""
    out: dict = {}
    for r in doc["rows"]:
        out.setdefault(r["arm"], {}).setdefault(r["seed"], []).append(r)
    for seeds in out.values():
        for rs in seeds.values():
            rs.sort(key=lambda r: r["step"])
    return out


def _at(rows: list[dict], step: int, key: str):
    return next((r[key] for r in rows if r["step"] == step), None)


def success(doc: dict) -> dict:
    """The protocol's three criteria over the document: each {name, pass, numbers, why}."""
    arms = by_arm(doc)
    out = []
    full = arms.get("full", {})
    per_seed = {s: sum(r["admitted"] for r in rs) for s, rs in full.items()}
    out.append({"name": "full_admits", "pass": any(v > 0 for v in per_seed.values()),
                "numbers": {"skills_committed_per_seed": per_seed}})

    noadm = arms.get("no_admission", {})
    runs = list(full.values()) + list(noadm.values())
    if full and noadm:
        last = min(rs[-1]["step"] for rs in runs if rs)
        f = [_at(rs, last, "turn1_fast_1.2") for rs in full.values()]
        n = [_at(rs, last, "turn1_fast_1.2") for rs in noadm.values()]
        spread = max(max(f) - min(f), max(n) - min(n))
        diff = sum(f) / len(f) - sum(n) / len(n)
        out.append({"name": "turn1_fast_1.2_beats_no_admission", "pass": diff > spread,
                    "numbers": {"step": last, "full": f, "no_admission": n, "difference_of_means": diff,
                                "spread_across_seeds": spread}})
    else:
        out.append({"name": "turn1_fast_1.2_beats_no_admission", "pass": False,
                    "numbers": {}, "why": "needs rows of the full and the no_admission arms"})

    njt = arms.get("no_joint_training", {})
    if full and njt:
        def share(seeds):
            xs = [r["admitted_share_of_schemes"] for rs in seeds.values() for r in rs]
            return sum(xs) / len(xs) if xs else 0.0

        a, b = share(full), share(njt)
        out.append({"name": "admitted_skills_picked_more_than_no_joint_training", "pass": a > b,
                    "numbers": {"full": a, "no_joint_training": b}})
    else:
        out.append({"name": "admitted_skills_picked_more_than_no_joint_training", "pass": False,
                    "numbers": {}, "why": "needs rows of the full and the no_joint_training arms"})
    return {"pass": all(c["pass"] for c in out), "criteria": out}


def describe(result: dict) -> list[str]:
    """One line per criterion: PASS/FAIL, its name and numbers."""
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3f}"
        if isinstance(v, list):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        return str(v)

    lines = []
    for c in result["criteria"]:
        nums = ", ".join(f"{k} {fmt(v)}" for k, v in c["numbers"].items()) or c.get("why", "")
        lines.append(f"{'PASS' if c['pass'] else 'FAIL'}  {c['name']}: {nums}")
    return lines


def table(doc: dict) -> list[str]:
    """Per arm: seeds, steps, last-step library size and turn-1 Fast_1.2 (mean, min-max over
    seeds), skills committed, mean share of schemes with an admitted skill; then the final
    library on vs off."""
    head = (f"{'arm':18s} {'seeds':>5s} {'steps':>5s} {'library':>8s} {'committed':>9s} "
            f"{'turn1 Fast_1.2 (last)':>22s} {'best Fast_1.2':>13s} {'admitted share':>14s}")
    lines = [head]
    for arm, seeds in by_arm(doc).items():
        last = [rs[-1] for rs in seeds.values() if rs]
        t1 = [r["turn1_fast_1.2"] for r in last]
        shares = [r["admitted_share_of_schemes"] for rs in seeds.values() for r in rs]
        lines.append(f"{arm:18s} {len(seeds):5d} {max(len(rs) for rs in seeds.values()):5d} "
                     f"{sum(r['library_size'] for r in last) / len(last):8.1f} "
                     f"{sum(r['admitted'] for rs in seeds.values() for r in rs):9d} "
                     f"{sum(t1) / len(t1):10.3f} ({min(t1):.2f}-{max(t1):.2f})"
                     f"{sum(r['best_fast_1.2'] for r in last) / len(last):14.3f}"
                     f"{sum(shares) / max(len(shares), 1):15.3f}")
    for run in doc["runs"]:
        if run.get("final"):
            f = run["final"]
            lines.append(f"final library ({run['arm']}, seed {run['seed']}, {len(f['library'])} skills) at turn 1: "
                         f"Fast_1.2 on {f['on']['turn1_fast_1.2']:.3f} / off {f['off']['turn1_fast_1.2']:.3f}")
    return lines


def plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = (("library_size", "library size"), ("turn1_fast_1.2", "turn-1 Fast_1.2"))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, (key, title) in zip(axes, keys):
        for arm, seeds in by_arm(doc).items():
            steps = sorted({r["step"] for rs in seeds.values() for r in rs})
            vals = [[_at(rs, s, key) for rs in seeds.values() if _at(rs, s, key) is not None] for s in steps]
            mean = [sum(v) / len(v) for v in vals]
            line, = ax.plot(steps, mean, marker="o", label=f"{arm} ({len(seeds)} seeds)")
            ax.fill_between(steps, [min(v) for v in vals], [max(v) for v in vals], color=line.get_color(), alpha=0.2)
        ax.set_title(title)
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, buf.getvalue())


def write(doc: dict, json_path: Path) -> Path:
    """The JSON and the PNG beside it (same name)."""
    write_json(json_path, doc)
    png = json_path.with_suffix(".png")
    plot(doc, png)
    return png
