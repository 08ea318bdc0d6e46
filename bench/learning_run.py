"""Learning on real kernels: SFT a small model on kernel variants of known speed, then RL
with the real evaluator, beside a control at learning rate 0 from the same SFT model.

The data are our own Triton kernels (``bench/learning/variants/``, listed in its
``manifest.json``): for each of 8 built-in tasks (all three levels) three correct variants
of clearly different speed and two incorrect ones. Phases, each runnable on its own so a
run fits the device's 10-minute calls (the run folder ``--dir`` carries everything between
them):

    variants   every variant judged once by the real evaluator  -> DIR/verdicts.jsonl
    sft        a BPE tokenizer trained on our own kernel text and a Qwen3-shaped model of
               a few million parameters (random init), SFT on each task's prompts answered
               with each of its variants (equal weight), so that it samples all of them:
               policy prompts with no skills and with the skills BM25 ranks first,
               selection prompts answered with a well-formed pick of those skills, and
               summary prompts answered with a skill naming what makes the fastest
               variant fast (all three agents get an SFT cold start)
                                                                  -> DIR/sft/model
    rl         ``--arm both`` (the default: the two arms in one process, step by step in
               turn, sharing one evaluator), ``--arm learn`` (``--lr``) or ``--arm control``
               (lr = 0), all from DIR/sft/model and the same rl.seed: the trainer's real
               pipeline (selection, policy and summary agents on one backbone, the
               recipe's advantages and reward, the sandboxed evaluator); per step the
               mean policy reward, Fast_1 and Fast_1.5 of the sampled kernels, the mean
               speedup of correct samples, the share of each variant among the samples,
               skills admitted, the model's batched generations    -> DIR/arm-<name>.json
    report     the JSON, a PNG and a table                         -> bench/results/learning_run_h200.*

A rerun keeps what is saved: the sft phase an SFT model already in DIR/sft, the rl phase an
arm already run (its DIR/arm-<name>.json), unless ``--overwrite``.
A source judged once keeps its verdict for the rest of the run, across calls and arms
(``eval.reuse_verdicts``; DIR/verdicts.jsonl): the two arms are scored by the same verdicts,
and a step costs sampling, the update and the evaluation of sources never seen before.

    python bench/learning_run.py all --dir .lrun                     # one process, every phase
    python bench/learning_run.py variants --dir .lrun                # or phase by phase
    python bench/learning_run.py sft --dir .lrun
    python bench/learning_run.py rl --budget-s 490 --dir .lrun       # both arms, steps that fit
    python bench/learning_run.py report --dir .lrun
    python bench/learning_run.py all --dir /tmp/lrun --tiny          # CPU smoke of the same code path
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import kernel_variants as kv  # noqa: E402
from kernel_variants import classify, fastest_variant, first_kernel, normalized, skill_call  # noqa: E402,F401

VARIANTS = kv.VARIANTS
RESULTS = ROOT / "bench" / "results"
SHAPE, TINY = kv.MODEL_SHAPE, kv.TINY_SHAPE  # 4.0M parameters (15.3 MiB in float32); a CPU-sized one
STEP_KEYS = ("reward/policy", "reward/select", "reward/summary", "correct/policy", "speedup/correct",
             "fast_1/policy", "fast_1.5/policy", "skills_admitted", "samples", "gen_s", "update_s", "step_s")


# ----------------------------------------------------------------------------- data
def manifest(tiny: bool = False) -> dict[str, list[dict]]:
    """task name -> its variants ({name, file, correct, what}); two tasks when ``tiny``."""
    return kv.manifest(VARIANTS, tiny)


def use_variants(folder: Path) -> None:
    """Read the variants (and their manifest.json) from ``folder`` instead."""
    global VARIANTS
    VARIANTS = Path(folder)


def variant_sources(tasks: dict) -> dict[str, dict[str, str]]:
    """task -> {variant name: source}."""
    return kv.variant_sources(tasks, VARIANTS)


def suite_dir(tasks: dict, out: Path) -> Path:
    """A suite folder holding only the chosen built-in tasks (same names, same sources)."""
    return kv.suite_dir(tasks, out)


def load_tasks(tasks: dict, d: Path, folder: str = "suite"):
    return kv.load_tasks(tasks, d, folder)


# ----------------------------------------------------------------------------- verdicts
def load_verdicts(ev, tasks_by_name, d: Path) -> int:
    """Seed the evaluator with every verdict this run has given so far."""
    from davinci_kernel.files import read_jsonl
    from davinci_kernel.records import EvalResult

    path = d / "verdicts.jsonl"
    rows = read_jsonl(path) if path.is_file() else []
    for r in rows:
        if r["task"] in tasks_by_name:
            ev.remember(tasks_by_name[r["task"]], r["source"], EvalResult.from_dict(r["result"]))
    return len(rows)


def save_verdicts(d: Path, rows: list[dict]) -> None:
    from davinci_kernel.files import append_jsonl

    if rows:
        append_jsonl(d / "verdicts.jsonl", rows)


def phase_variants(args, d: Path) -> None:
    from davinci_kernel.evaluate import Evaluator

    tasks = manifest(args.tiny)
    srcs = variant_sources(tasks)
    objs = load_tasks(tasks, d)
    items = [(t, srcs[t.name][v["name"]]) for t in objs for v in tasks[t.name]]
    names = [(t.name, v["name"]) for t in objs for v in tasks[t.name]]
    with Evaluator(run_config(args, d, "variants").eval) as ev:
        n = load_verdicts(ev, {t.name: t for t in objs}, d)
        t0 = time.monotonic()
        results = ev.evaluate_many(items)
        wall = time.monotonic() - t0
    save_verdicts(d, [{"task": t.name, "source": s, "result": r.to_dict()}
                      for (t, s), r in zip(items, results) if not r.reused])
    table = [{"task": tn, "variant": vn, "correct": r.correct, "speedup": r.speedup, "error_kind": r.error_kind,
              "flags": r.flags} for (tn, vn), r in zip(names, results)]
    _write(d / "variants.json", {"variants": table, "seconds": wall, "reused_from_earlier_calls": n})
    for row in table:
        sp = f"{row['speedup']:.2f}x" if row["speedup"] else "-"
        print(f"{row['task']:40s} {row['variant']:24s} {'correct' if row['correct'] else 'WRONG':8s} {sp}")


# ----------------------------------------------------------------------------- SFT
def sft_examples(tasks: dict, objs, store_cfg, max_selected: int, max_new_skills: int = 2,
                 speedups: dict | None = None) -> list[dict]:
    """Per task and variant: the policy prompt without skills and with the BM25 top skills,
    each answered with the variant; per task: the selection prompt answered with a pick of
    the BM25 top skills, and the summary prompt of an episode that wrote the fastest variant
    (without skills and with the pick) answered with one skill that names what makes it
    fast. ``speedups``: (task, variant) -> the evaluator's speedup (DIR/variants.json);
    without it the manifest's first correct variant stands for the fastest."""
    from davinci_kernel.agents.policy import first_messages
    from davinci_kernel.agents.selection import selection_messages
    from davinci_kernel.agents.summary import summary_messages
    from davinci_kernel.skills.select import candidates_for
    from davinci_kernel.skills.store import open_store

    store = open_store(store_cfg)
    existing = store.names()
    srcs = variant_sources(tasks)
    rows = []
    for task in objs:
        cands = candidates_for(task, store, store_cfg)
        picked = list(cands[:max_selected])
        pick = {"name": "select_skills", "arguments": {
            "think": "these fit the operations of the module",
            "selected_skills": [{"name": s.name, "reason": "fits this module"} for s in picked]}}
        rows.append({"task": task.name, "role": "select", "messages": selection_messages(task, cands, max_selected) + [
            {"role": "assistant", "content": "<tool_call>\n" + json.dumps(pick) + "\n</tool_call>"}]})
        for src in srcs[task.name].values():
            reply = "```python\n" + src.strip() + "\n```"
            for skills in ((), picked):
                rows.append({"task": task.name,
                             "messages": first_messages(task, skills, "triton") + [
                                 {"role": "assistant", "content": reply}]})
        best = fastest_variant(tasks[task.name], task.name, speedups)
        code, sp = srcs[task.name][best["name"]], (speedups or {}).get((task.name, best["name"]))
        answer = "<tool_call>\n" + json.dumps(skill_call(task, best, code)) + "\n</tool_call>"
        for skills in ((), picked):  # one turn: the summarized episode's first turn is its best
            rows.append({"task": task.name, "role": "summary", "messages": summary_messages(
                task, code, sp, code, sp, 1, skills, existing, max_new_skills) + [
                    {"role": "assistant", "content": answer}]})
    store.close()
    return rows


def phase_sft(args, d: Path) -> None:
    from davinci_kernel.files import jsonl_text, read_jsonl, write_atomic
    from davinci_kernel.rl.sft import train_sft

    if (d / "sft" / "model").exists():
        if not args.overwrite:
            _usage(f"an SFT model is already in {d / 'sft'}; --overwrite trains it anew")
        shutil.rmtree(d / "sft")
    tasks = manifest(args.tiny)
    objs = load_tasks(tasks, d)
    cfg = run_config(args, d, arm="sft")
    measured = _read(d / "variants.json")
    speedups = {(r["task"], r["variant"]): r["speedup"] for r in (measured or {}).get("variants", [])}
    rows = sft_examples(tasks, objs, cfg.skills, cfg.skills.max_selected, cfg.skills.max_new_skills, speedups)
    data = write_atomic(d / "sft.jsonl", jsonl_text(rows))
    shape = TINY if args.tiny else SHAPE
    base = kv.base_model(d / "base", shape, args.seed, [s for v in variant_sources(tasks).values() for s in v.values()])
    sft_cfg = kv.sft_config(base, data, args.sft_epochs, args.sft_lr, args.sft_budget_s or 0)
    t0 = time.monotonic()
    got = train_sft(sft_cfg, out=str(d / "sft"), echo=print)
    ms = read_jsonl(d / "sft" / "metrics.jsonl")
    _write(d / "sft.json", {"examples": len(rows), "kept": got["samples"], "optimizer_steps": got["steps"],
                            "epochs": got["epochs"], "epochs_asked": args.sft_epochs, "lr": args.sft_lr,
                            "seconds": time.monotonic() - t0,
                            "loss_first": ms[0]["loss"] if ms else None, "loss_last": got["loss"],
                            "parameters": kv.parameters(d / "sft" / "model")})
    print(f"sft: {len(rows)} examples, {got['steps']} steps, loss {ms[0]['loss'] if ms else 0:.3f} -> "
          f"{got['loss']:.4f}")


# ----------------------------------------------------------------------------- RL
def run_config(args, d: Path, arm: str):
    import torch

    from davinci_kernel.config import load_config

    bf16 = str(torch.cuda.is_available()).lower()
    lr = 0.0 if arm == "control" else args.lr
    return load_config(ROOT / "configs" / "tiny-cpu.yaml", [
        f"rl.model=hf:{d / 'sft' / 'model'}", "rl.env=rollout", f"rl.suite={d / f'suite-{arm}'}", f"rl.steps={args.steps}",
        "rl.eval_every=0", f"rl.bf16={bf16}", "rl.grad_checkpointing=false", "rl.micro_batch_tokens=32768",
        f"rl.lr={lr}", f"rl.batch_tasks={len(manifest(args.tiny))}", "rl.minibatches=1", f"rl.seed={args.seed}",
        "rl.save_every=1000", "rl.keep_checkpoints=1",
        "rollout.k_schemes=1", f"rollout.n_rollouts={args.rollouts}", "rollout.turns=1", "rollout.s_summaries=2",
        # one turn: the summary trigger's gain over turn 1 cannot exceed 1, so it asks for the speedup alone
        "rollout.summary_min_gain=1.0", f"rollout.max_new_tokens={args.new}",
        f"rollout.temperature={args.temperature}", f"rollout.gen_batch={args.gen_batch}",
        f"skills.db={d / f'skills-{arm}.db'}", "skills.select_mode=llm",
        f"eval.device={'cpu' if args.tiny else 'cuda'}", "eval.reuse_verdicts=true", "eval.baseline_compile=false",
        "eval.workers_per_gpu=4", f"eval.cache_dir={d / 'eval-cache'}"])


def tally(groups, srcs: dict[str, dict[str, str]]) -> tuple[dict[str, dict[str, int]], list[dict]]:
    """A step's task groups -> (task -> {variant name | 'other' | 'none': policy turns},
    the verdicts given this step to sources not judged before, as DIR/verdicts.jsonl rows)."""
    shares: dict[str, dict[str, int]] = {}
    fresh = []
    for g in groups:
        for e in g.episodes:
            for turn in e.turns:
                code = turn.parsed if isinstance(turn.parsed, str) else None  # a policy turn's code
                kind = classify(code, srcs[g.task])
                shares.setdefault(g.task, {}).setdefault(kind, 0)
                shares[g.task][kind] += 1
                if code and turn.result is not None and not turn.result.reused:
                    fresh.append({"task": g.task, "source": code, "result": turn.result.to_dict()})
    return shares, fresh


def summary_counts(groups) -> dict[str, int]:
    """A step's summary agent at work: episodes summarized (the trigger fired), summaries
    sampled, summaries whose reply parsed as a tool call, skills they proposed, skills
    that passed the content filter and were re-generated greedily, skills the
    verification staged (at most one a task is admitted)."""
    out = dict.fromkeys(("triggered", "sampled", "parsed", "proposed", "regenerated", "staged"), 0)
    for g in groups:
        out["triggered"] += bool(g.summaries)
        out["sampled"] += len(g.summaries)
        for t in g.summaries:
            if not t.parse_error:
                out["parsed"] += 1
                out["proposed"] += len((t.parsed or {}).get("skills", []))
        for v in g.verifications:
            out["regenerated"] += v.completion is not None
            out["staged"] += bool((v.parsed or {}).get("staged"))
    return out


class Arm:
    """One arm's trainer (``dvk train rl``'s RLTrainer on the real pipeline) sharing the run's
    evaluator; ``step(n)`` runs one RL step and returns its row for DIR/arm-<name>.json."""

    def __init__(self, args, d: Path, arm: str, ev, srcs: dict):
        from davinci_kernel.rl.trainer import RLTrainer

        self.d, self.arm, self.srcs = d, arm, srcs
        self.cfg = run_config(args, d, arm)
        suite_dir(manifest(args.tiny), d / f"suite-{arm}")  # one folder per arm (the trainer loads it)
        work = d / f"rl-{arm}"
        if work.exists():
            shutil.rmtree(work)
        for db in d.glob(f"skills-{arm}.db*"):
            db.unlink()
        self.trainer = RLTrainer(self.cfg, out=work)
        self.trainer.env.evaluator.close()  # the run's one evaluator, seeded with every verdict so far
        self.trainer.env.evaluator = ev
        self.captured: list = []
        collect = self.trainer.env.collect

        def spy(ts, gen, step):
            groups = collect(ts, gen, step)
            self.captured[:] = groups
            return groups

        self.trainer.env.collect = spy
        self.out = {"arm": arm, "lr": self.cfg.rl.lr, "seed": args.seed, "gpu": _gpu(), "torch": _torch(),
                    "date": datetime.date.today().isoformat(),
                    "settings": {"temperature": args.temperature, "rollouts": args.rollouts, "new": args.new,
                                 "steps": args.steps, "budget_s": args.budget_s, "arms": args.arm},
                    "steps": []}

    def step(self, step: int) -> dict:
        m = self.trainer.step(step)
        shares, fresh = tally(self.captured, self.srcs)
        save_verdicts(self.d, fresh)
        row = {k: m.get(k) for k in STEP_KEYS}
        row.update(step=step, shares=shares, summaries=summary_counts(self.captured), new_sources_judged=len(fresh),
                   gen_batches=BATCHES[:])
        BATCHES.clear()
        self.out["steps"].append(row)
        self.save()
        print(f"{self.arm} step {step}: reward {row['reward/policy']:.3f}  fast_1 {row['fast_1/policy']:.2f}  "
              f"fast_1.5 {row['fast_1.5/policy']:.2f}  speedup/correct {row['speedup/correct'] or 0:.2f}  "
              f"summaries parsed {row['summaries']['parsed']}/{row['summaries']['sampled']}  "
              f"skills admitted {row['skills_admitted'] or 0:g}  "
              f"new sources {len(fresh)}  gen {row['gen_s']:.0f}s  step {row['step_s']:.0f}s", flush=True)
        return row

    def save(self) -> None:
        _write(self.d / f"arm-{self.arm}.json", self.out)


BATCHES: list[dict] = []  # the model's batched generations since the last step row


def _time_batches() -> None:
    """Record every batched generation (sequences, longest reply, seconds): where a step's
    sampling time goes, beside the evaluator's."""
    from davinci_kernel.llm.hf_backend import HFBackend

    if getattr(HFBackend._batch, "_timed", False):
        return
    inner = HFBackend._batch

    def timed(self, reqs):
        t = time.perf_counter()
        out = inner(self, reqs)
        BATCHES.append({"n": len(reqs), "longest": max((len(c.token_ids or []) for c in out), default=0),
                        "s": round(time.perf_counter() - t, 2)})
        return out

    timed._timed = True
    HFBackend._batch = timed


def phase_rl(args, d: Path) -> None:
    """One arm, or ``--arm both``: the two arms in one process, step by step in turn (learn
    step n, then control step n), sharing one evaluator (one evaluator owns a GPU's memory
    plan) and so every verdict as soon as it is given."""
    from davinci_kernel.evaluate import Evaluator

    tasks = manifest(args.tiny)
    srcs = variant_sources(tasks)
    names = ("learn", "control") if args.arm == "both" else (args.arm,)
    if not (d / "sft" / "model").is_dir():
        _usage(f"no SFT model in {d / 'sft' / 'model'}; run the sft phase first")
    done = [f"arm-{a}.json" for a in names if (d / f"arm-{a}.json").is_file()]
    if done and not args.overwrite:
        _usage(f"{', '.join(done)} already in {d}; --overwrite starts {'them' if len(done) > 1 else 'it'} over")
    ev = Evaluator(run_config(args, d, names[0]).eval)
    _time_batches()
    try:
        seeded = load_verdicts(ev, {t.name: t for t in load_tasks(tasks, d)}, d)
        arms = [Arm(args, d, a, ev, srcs) for a in names]
        for a in arms:
            a.out["verdicts_seeded"] = seeded
        t0, longest = time.monotonic(), 0.0
        for step in range(1, args.steps + 1):
            if args.budget_s and time.monotonic() - t0 + longest > args.budget_s:
                for a in arms:
                    a.out["stopped"] = f"budget: {args.budget_s:g} s would not hold step {step}"
                    a.save()
                print(f"stopped before step {step} (budget {args.budget_s:g} s)", flush=True)
                break
            t_step = time.monotonic()
            for a in arms:
                a.step(step)
            longest = max(longest, time.monotonic() - t_step)
    finally:
        ev.close()


# ----------------------------------------------------------------------------- report
def phase_report(args, d: Path) -> None:
    arms = {a: json.loads((d / f"arm-{a}.json").read_text()) for a in ("learn", "control")
            if (d / f"arm-{a}.json").is_file()}
    if not arms:
        _usage("report: no arm-*.json in the run folder; run the rl phase first")
    variants = _read(d / "variants.json")
    kinds = _kinds(variants["variants"]) if variants else {}
    for v in arms.values():
        for row in v["steps"]:
            row.update(_variant_shares(row.get("shares") or {}, kinds))
    first = next(iter(arms.values()))
    res = {"gpu": first.get("gpu", _gpu()), "torch": first.get("torch", _torch()),
           "date": first.get("date", datetime.date.today().isoformat()),
           "variants": variants, "sft": _read(d / "sft.json"), "arms": arms,
           "summary": {a: _summary(v["steps"]) for a, v in arms.items()}}
    name = "learning_run_tiny" if args.tiny else "learning_run_h200"
    out = Path(args.results) if args.results else RESULTS
    _write(out / f"{name}.json", res)
    _plot(arms, out / f"{name}.png")
    print(f"{'arm':8s} {'metric':22s} {'first':>8s} {'last':>8s} {'max':>8s} {'step spread':>12s}")
    for a, s in res["summary"].items():
        for k, v in s.items():
            print(f"{a:8s} {k:22s} {v['first']:8.3f} {v['last']:8.3f} {v['max']:8.3f} {v['spread']:12.3f}")
    print(f"wrote {out / name}.json and .png")


def _kinds(table: list[dict]) -> dict[str, dict]:
    """task -> {"fastest": the correct variant the evaluator timed fastest, "wrong": the
    variants it judged incorrect} (from DIR/variants.json)."""
    out: dict[str, dict] = {}
    for r in table:
        k = out.setdefault(r["task"], {"fastest": None, "best": 0.0, "wrong": set()})
        if not r["correct"]:
            k["wrong"].add(r["variant"])
        elif (r["speedup"] or 0.0) > k["best"]:
            k["fastest"], k["best"] = r["variant"], r["speedup"]
    return out


def _variant_shares(shares: dict[str, dict[str, int]], kinds: dict[str, dict]) -> dict[str, float]:
    """A step's share of policy samples that are their task's fastest variant, and that are
    a variant judged incorrect."""
    total = fastest = wrong = 0
    for task, counts in shares.items():
        k = kinds.get(task, {"fastest": None, "wrong": set()})
        total += sum(counts.values())
        fastest += counts.get(k["fastest"], 0)
        wrong += sum(n for name, n in counts.items() if name in k["wrong"])
    return {"share/fastest_variant": fastest / total if total else 0.0,
            "share/wrong_variant": wrong / total if total else 0.0}


def _summary(steps: list[dict]) -> dict:
    out = {}
    for k in ("reward/policy", "fast_1/policy", "fast_1.5/policy", "speedup/correct", "share/fastest_variant",
              "share/wrong_variant"):
        xs = [s.get(k) or 0.0 for s in steps]
        diffs = [abs(b - a) for a, b in zip(xs, xs[1:])]
        out[k] = {"first": xs[0], "last": xs[-1], "max": max(xs),
                  "spread": (sum(diffs) / len(diffs)) if diffs else 0.0}  # mean step-to-step change
    return out


def _plot(arms: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("reward/policy", "speedup/correct", "fast_1.5/policy", "share/fastest_variant")
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 3.2))
    for ax, k in zip(axes, keys):
        for a, v in arms.items():
            ax.plot([s["step"] for s in v["steps"]], [s.get(k) or 0.0 for s in v["steps"]], marker="o",
                    label=f"{a} (lr {v['lr']:g})")
        ax.set_title(k)
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _usage(msg: str) -> None:
    kv.usage_exit("learning_run.py", msg)


_read, _write, _gpu, _torch = kv.read_json, kv.write_json, kv.gpu_name, kv.torch_version


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=("variants", "sft", "rl", "report", "all"))
    ap.add_argument("--dir", default=str(ROOT / ".lrun"), help="the run folder (carried between device calls)")
    ap.add_argument("--arm", choices=("learn", "control", "both"), default="both",
                    help="both: the two arms in one process, step by step in turn, one evaluator")
    ap.add_argument("--steps", type=int, default=12, help="RL steps per arm")
    ap.add_argument("--lr", type=float, default=3e-4, help="learning rate of the learn arm (the control's is 0)")
    ap.add_argument("--rollouts", type=int, default=8, help="policy rollouts per scheme")
    ap.add_argument("--budget-s", type=float, help="rl: no step is begun that the longest step so far would take "
                    "past this many seconds (the arm's JSON then says where it stopped)")
    ap.add_argument("--temperature", type=float, default=0.5,
                    help="sampling temperature; the SFT model's choice among variants is near uniform at any "
                    "temperature, while below 1 fewer replies stray from every variant into code never judged")
    ap.add_argument("--new", type=int, default=1536, help="max new tokens per reply (the longest variant is about 1200)")
    ap.add_argument("--gen-batch", type=int, default=128)
    ap.add_argument("--sft-epochs", type=int, default=100, help="SFT epochs (104 examples: 80 policy, 8 selection, 16 summary)")
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument("--sft-budget-s", type=float, help="sft: no epoch is begun that the longest so far would take "
                    "past this many seconds (sft.max_seconds; the model is saved either way)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--results", help="where report writes (default bench/results)")
    ap.add_argument("--variants", default=str(VARIANTS), help="folder of the variants and their manifest.json")
    ap.add_argument("--overwrite", action="store_true",
                    help="sft: train anew over DIR/sft; rl: start over an arm whose arm-<name>.json exists")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke: 2 tasks, a tiny model, a few tokens")
    args = ap.parse_args()
    if min(args.steps, args.rollouts, args.new, args.sft_epochs) < 1 or args.lr < 0:
        _usage("--steps, --rollouts, --new and --sft-epochs must be >= 1, --lr >= 0")
    if args.tiny:
        args.steps, args.rollouts, args.new, args.sft_epochs = min(args.steps, 1), 2, 16, 1
    use_variants(Path(args.variants))
    if not (VARIANTS / "manifest.json").is_file():
        _usage(f"no manifest.json in {VARIANTS}")
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    phases = ("variants", "sft", "rl", "report") if args.phase == "all" else (args.phase,)
    if args.phase == "all":
        args.arm = "both"
    try:
        for ph in phases:
            {"variants": phase_variants, "sft": phase_sft, "rl": phase_rl, "report": phase_report}[ph](args, d)
    except KeyboardInterrupt:  # what each step saved stays; the step under way is not recorded
        print(f"learning_run.py: interrupted during the {ph} phase", file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        # the evaluator is closed (its with-block ran); evaluations still in flight on other
        # threads are not waited for
        os._exit(130)


if __name__ == "__main__":
    main()
