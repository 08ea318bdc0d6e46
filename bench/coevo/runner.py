"""One arm x seed of the experiment, start to finish, resumable.

``ArmRun`` builds the arm's trainer (``dvk train rl``'s ``RLTrainer`` on the real pipeline:
selection, policy and summary agents on one backbone, admission by execution) from the SFT
model and the arm's config, with the run's ``VerdictBook`` as its environment's evaluator,
a library that starts from the protocol's distractor skills, and the RL tasks only; then
runs the protocol's steps. Every ``step_heldout.every`` steps, a small turn-1 evaluation
on the held-out tasks with the library (their Fast_1.2 over steps). After each step: the
step's row (``metrics.step_row``), then a checkpoint of model, optimizer and library, then
the row in ``DIR/rows/<arm>-s<seed>.json`` (written atomically, and also into ``mirror``
when given). A row waits in ``work/pending-row.json`` until its checkpoint is sealed, so a
rerun resumes from the newest checkpoint with exactly the rows that led there (no step
counted twice); a rows file without a checkpoint to resume from is never overwritten
(``restart`` keeps it as ``<name>.attempt-N.json``). An arm stopped by the time budget
resumes on a rerun; one that is done is left as it is. At the end, the final evaluation
(``heldout_eval``): every held-out task at turn 1 with the final library, and for the arms
the protocol names also without skills, ``final_eval.samples`` samples each, every sample
kept (its picks, whether one carries the task's technique, whether it is fast) for the
pre-registered tests.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import shutil
import time
from pathlib import Path

from kernel_variants import gpu_name, read_json, torch_version, write_json

from davinci_kernel.rl.progress import bar

from . import metrics
from .protocol import DISTRACTORS, arm_config, recorded, work_dir

ENDED = ("done",)


class RunError(Exception):
    """Bad state of the run folder for this command (one line, exit 2)."""


def rows_path(d: Path, arm: str, seed: int) -> Path:
    return Path(d) / "rows" / f"{arm}-s{seed}.json"


class ArmRun:
    def __init__(self, p: dict, d: Path, arm: str, seed: int, book, cat: dict, mirror: Path | None = None,
                 budget_s: float = 0.0, restart: bool = False, t_start: float | None = None, echo=print):
        self.p, self.d, self.arm, self.seed, self.book = p, Path(d), arm, seed, book
        self.mirror, self.budget_s, self.restart, self.echo = mirror, budget_s, restart, echo
        self.t_start = t_start if t_start is not None else time.monotonic()
        self.path = rows_path(d, arm, seed)
        self.work = work_dir(d, arm, seed)
        from .catalog import by_role

        self.tasks, self.heldout = list(p["rl_tasks"]), list(p["heldout_tasks"])
        self.sources = {t: {k["name"]: k["source"] for k in cat[t]} for t in self.tasks + self.heldout}
        self.fast = {t: by_role(cat[t])["fast"]["name"] for t in self.tasks + self.heldout}

    # ------------------------------------------------------------------ files
    def save(self, doc: dict) -> None:
        write_json(self.path, doc)
        if self.mirror is not None:
            write_json(Path(self.mirror) / self.path.name, doc)

    def _checked_config(self):
        cfg = arm_config(self.p, self.d, self.arm, self.seed)
        plan = read_json(self.d / "run.json")
        if plan is None:
            raise RunError(f"no run.json in {self.d}: run the prepare command first")
        want = plan["arms"].get(f"{self.arm}-s{self.seed}")
        if want is None or want["config"] != recorded(cfg, self.work, self.d):
            raise RunError(f"run.json in {self.d} records another config for {self.arm} seed {self.seed} "
                           "(the protocol changed since prepare): use a new run folder")
        return cfg

    def _start_state(self) -> tuple[dict | None, int]:
        """(the rows document to continue, the step to resume from; 0 = from the start)."""
        from davinci_kernel.rl import checkpoint as ckpt

        doc = read_json(self.path)
        found = ckpt.latest_complete(self.work / "checkpoints") if self.work.is_dir() else None
        ck = found[0] if found else 0
        done = [r["step"] for r in doc["steps"]] if doc else []
        pending = read_json(self.work / "pending-row.json")
        if doc and pending and pending["step"] == ck and len(done) == ck - 1:
            doc["steps"].append(pending["row"])  # its checkpoint was sealed; the row was not yet written
            done.append(ck)
        if doc and done and done == list(range(1, ck + 1)):
            return doc, ck
        if doc and done and not self.restart:
            raise RunError(f"{self.path} holds {len(done)} step(s) of an unfinished run and {self.work} no "
                           "checkpoint to resume them from; --restart keeps that file as an attempt and starts over")
        if doc and done:
            n = 1
            while (keep := self.path.with_name(f"{self.path.stem}.attempt-{n}.json")).exists():
                n += 1
            self.path.rename(keep)
            self.echo(f"kept the unfinished rows as {keep}")
        if self.work.exists():
            shutil.rmtree(self.work)
        return None, 0

    # ------------------------------------------------------------------ run
    def run(self) -> dict:
        doc = read_json(self.path)
        if doc is not None and doc.get("protocol_version", 1) != self.p["version"]:
            raise RunError(f"{self.path} was written under protocol version {doc.get('protocol_version', 1)} "
                           f"(this is version {self.p['version']}): use a new run folder")
        if doc is not None and doc.get("status") in ENDED:
            self.echo(f"{self.path.name}: already {doc['status']} ({len(doc['steps'])} steps); kept as it is")
            return doc
        cfg = self._checked_config()
        doc, start = self._start_state()
        if doc is None:
            doc = {"arm": self.arm, "seed": self.seed, "protocol": self.p["name"],
                   "protocol_version": self.p["version"], "gpu": gpu_name(),
                   "torch": torch_version(), "date": datetime.date.today().isoformat(),
                   "config": recorded(cfg, self.work, self.d), "status": "running", "steps": [], "final": None, "calls": []}
        doc["calls"].append({"started": datetime.datetime.now().isoformat(timespec="seconds"), "from_step": start,
                             "gpu": gpu_name(), "verdicts_in_book": len(self.book)})
        self.save(doc)
        trainer = self._trainer(cfg, resume=start > 0)
        first = {}
        for r in doc["steps"]:
            for a in r["admissions"]:
                first.setdefault(a["task"], a["step"])
        longest = 0.0
        doc["status"] = "running"
        doc.pop("stopped", None)
        reserve = self.p["budget_s"]["final_reserve"]
        with bar(self.p["steps"], start, f"{self.arm} s{self.seed}") as shown:
            for step in range(start + 1, self.p["steps"] + 1):
                elapsed = time.monotonic() - self.t_start
                if self.budget_s and elapsed + longest + reserve > self.budget_s:
                    doc["status"] = "stopped"
                    doc["stopped"] = f"time budget: {self.budget_s:g} s would not hold step {step}"
                    self.echo(f"{self.arm} seed {self.seed}: stopped before step {step} (budget {self.budget_s:g} s)")
                    break
                t0 = time.monotonic()
                row = self._step(trainer, cfg, step, first)
                if step % self.p["step_heldout"]["every"] == 0 or step == self.p["steps"]:
                    ev = heldout_eval(trainer, self.book, cfg, self.p, self.sources, self.p["step_heldout"]["samples"],
                                      off=False, seed=step)
                    row["heldout_turn1_fast_1.2"] = ev["on"]["turn1_fast_1.2"]
                    row["heldout_helpful_pick_share"] = ev["on"]["helpful_pick_share"]
                write_json(self.work / "pending-row.json", {"step": step, "row": row})
                trainer.save(step)
                doc["steps"].append(row)
                self.save(doc)
                (self.work / "pending-row.json").unlink()
                longest = max(longest, time.monotonic() - t0)
                self._echo_row(row)
                shown(step, f"library {row['library_size']}, turn-1 Fast_1.2 {row['turn1_fast_1.2']:.2f}")
        if doc["status"] != "stopped":
            f = self.p["final_eval"]
            if self.arm in f["on"]:
                doc["final"] = heldout_eval(trainer, self.book, cfg, self.p, self.sources, f["samples"],
                                            off=self.arm in f["off"], seed=10_000)
            doc["status"] = "done"
        doc["seconds"] = round(time.monotonic() - self.t_start, 1)
        self.save(doc)
        return doc

    def _trainer(self, cfg, resume: bool):
        from davinci_kernel.rl.env import RolloutEnv
        from davinci_kernel.rl.trainer import RLTrainer

        from .catalog import suite_dir

        suite_dir(self.tasks, self.work / "suite")
        if not resume:  # every arm's library starts from the distractors (a resumed one from its checkpoint)
            from davinci_kernel.skills.store import SkillStore

            with SkillStore(cfg.skills.db) as store:
                if len(store) == 0 and store.meta("seeded") is None:
                    store.import_jsonl(DISTRACTORS, step=0)
                    store.set_meta("seeded", DISTRACTORS.name)
        # the run's verdict book judges (one evaluator per GPU: it plans the GPU's memory)
        env = RolloutEnv(cfg, self.work, evaluator=self.book)
        trainer = RLTrainer(cfg, out=self.work, resume=resume, env=env)
        collect = env.collect
        self.seen: dict = {}

        def spy(ts, gen, step):
            self.seen = {"before": env.store.all()}
            groups = collect(ts, gen, step)
            self.seen.update(groups=groups, staged=dict(env.admission.staged))
            return groups

        env.collect = spy
        return trainer

    def _step(self, trainer, cfg, step: int, first: dict) -> dict:
        fresh0 = len(self.book.fresh)
        m = trainer.step(step)
        s = self.seen
        return metrics.step_row(self.arm, self.seed, step, s["groups"], m, cfg, s["before"],
                                trainer.env.store.all(), s["staged"], self.sources, self.fast, first,
                                len(self.book.fresh) - fresh0)

    def _echo_row(self, r: dict) -> None:
        f = r["funnel"]
        self.echo(f"{self.arm} s{self.seed} step {r['step']}: turn-1 Fast_1.2 {r['turn1_fast_1.2']:.2f}  best "
                  f"{r['best_fast_1.2']:.2f}  library {r['library_size']} (+{r['admitted']})  admitted share "
                  f"{r['admitted_share_of_schemes']:.2f}  funnel {f['triggered']}/{f['parsed']}/{f['proposed']}/"
                  f"{f['verified']}/{f['committed']}  {r['step_s'] or 0:.0f}s")


def heldout_eval(trainer, book, cfg, p: dict, sources: dict, n: int, off: bool, seed: int = 0) -> dict:
    """The arm's current model at turn 1 on every held-out task: ``n`` samples with the
    library (the selection agent sampled once per sample) and, when ``off``, ``n`` without
    skills. Every sample is kept: {fast (Fast_1.2), correct, speedup, picked, helpful (a
    pick is an admitted skill whose Example carries the task's technique), distractor}."""
    import torch

    from davinci_kernel.rl.local_gen import LocalBackend
    from davinci_kernel.rl.modeling import mixed_precision
    from davinci_kernel.rollout import Context, GroupPlan, run_group

    from .catalog import load_tasks, skill_example
    from .techniques import technique_present

    model = trainer.acc.unwrap_model(trainer.model)
    fp32 = next(model.parameters()).dtype == torch.float32
    cast = torch.bfloat16 if fp32 and mixed_precision(cfg.rl.bf16) == "bf16" else None
    backend = LocalBackend(model, trainer.tokenizer, max_batch=cfg.rollout.gen_batch, autocast=cast)
    ctx = Context(backend, book, dataclasses.replace(cfg.rollout, turns=1), cfg.reward, cfg.skills)
    store = trainer.env.store
    names = list(p["heldout_tasks"])
    tasks = load_tasks(names, Path(cfg.out), "heldout-suite")
    on = GroupPlan(k_schemes=n, null_scheme=False, n_rollouts=1, turns=1, summaries=False)
    no = GroupPlan(k_schemes=0, null_scheme=True, n_rollouts=n, turns=1, summaries=False)

    async def both():
        return await asyncio.gather(*(run_group(ctx, t, on, store=store, seed=999_983 * (seed + 1) + i)
                                      for i, t in enumerate(tasks)),
                                    *(run_group(ctx, t, no) for t in (tasks if off else [])))

    groups = asyncio.run(both())
    skills = store.all()
    admitted = {s.name: s for s in skills if s.source_task}
    distract = {s.name for s in skills if not s.source_task}
    out: dict = {"library": sorted(admitted), "distractors": sorted(distract), "samples_per_task": n,
                 "helpful_skills": {}, "samples": {}}
    for t in names:
        tech = p["heldout_tasks"][t]["technique"]
        out["helpful_skills"][t] = sorted(k for k, s in admitted.items() if technique_present(tech, skill_example(s)))
    for which, gs in (("on", groups[:len(tasks)]), ("off", groups[len(tasks):])):
        if not gs:
            continue
        per: dict = {}
        for g in gs:
            helpful = set(out["helpful_skills"][g.task])
            per[g.task] = [{"fast": bool(r is not None and r.correct and (r.speedup or 0.0) > p["margin_rule"]["p"]),
                            "correct": bool(r is not None and r.correct), "speedup": r.speedup if r else None,
                            "picked": list(ep.skills), "helpful": bool(helpful & set(ep.skills)),
                            "distractor": bool(distract & set(ep.skills))}
                           for ep in g.episodes if ep.turns for r in [ep.turns[0].result]]
        out["samples"][which] = per
        flat = [x for xs in per.values() for x in xs]
        out[which] = {"turn1_fast_1.2": metrics.share(flat, "fast"), "turn1_correct": metrics.share(flat, "correct"),
                      "helpful_pick_share": metrics.share(flat, "helpful"),
                      "distractor_pick_share": metrics.share(flat, "distractor"), "samples": len(flat),
                      "per_task": {t: metrics.share(xs, "fast") for t, xs in per.items()}}
    return out
