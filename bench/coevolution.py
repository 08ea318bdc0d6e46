"""The co-evolution experiment (protocol version 2): a technique learned on an RL task,
admitted by execution during RL, then selected and applied on held-out tasks the model was
never trained on, against arms one switch away, with pre-registered tests that can fail.

The protocol (task sets, techniques, variant roles and the margin rule, SFT mix, model, RL
settings, probe thresholds, arms, seeds, steps, budgets, the tests (a)-(e)) is
``bench/coevo/protocol.py``'s ``PROTOCOL``; it is written into ``run.json`` and into the
result JSON's ``protocol``. Commands, each resumable (what is saved is kept; a rerun
continues), each refusing a run folder made under another protocol version:

    prepare   run.json; every kernel judged by the real evaluator (verdicts.jsonl,
              variants.json); the role checks under the margin rule (roles/<card>-<day>.json:
              when they fail, one line, exit 2, no SFT); the SFT data (sft.jsonl, refused
              when sftdata.violations finds a row that breaks the rules: RL tasks' fast form
              only after feedback, held-out tasks never, practice apply/summary/select rows
              over all three techniques); a 4.0M Qwen3-shaped model trained from random init
    probe     the role checks of this card and day (judged when missing; failing: one
              line, exit 2), then per RL task the summary share, the greedy turn 1 with
              that skill on the held-out sibling and the no-skill fast share; the record
              (go or no-go, and what to change in the SFT data) appended to probes.jsonl
    arm       ONE arm x seed (the last probe said go, role checks first): RL steps of the real pipeline on the RL
              tasks (T=2, k=2 + null scheme, n=4, s=2, a library of distractor skills at
              step 0, thresholds 1.2/1.2, every admission re-timed in a fresh evaluation);
              a held-out turn-1 evaluation every 2 steps; one row per step in
              DIR/rows/<arm>-s<seed>.json (also written into --mirror); then the final
              evaluation: 64 turn-1 samples per held-out task with the final library (the
              full arm also without)
    collect   every rows file, the probes and the role records -> bench/results/
              coevolution_<card>.json (card: h100, h200 or h100_h200) with the five tests, a
              PNG per arm and seed, a table, and the verdicts in docs/coevolution.md
    check     the five tests over a result JSON
    plan      run.json only (the arms' configs, for inspection)
    all       prepare, probe, every arm x seed and collect in one process (the --tiny CPU smoke)

The GPU plan: one device call per command below, each under 10 minutes. The run folder
.corun (gitignored; about 20 MiB: the SFT model, the verdicts, the role records, run.json,
the SFT data) is carried in; rows and probe records come back through $OUT:

    python bench/coevolution.py prepare --dir .corun && python bench/coevolution.py probe \
        --dir .corun --mirror $OUT/probes; tar cz --exclude=work -C .corun . | split -b 15m - $OUT/corun.tgz.
                                  # one call, no carry; here: cat corun.tgz.* | tar xz -C .corun
    python bench/coevolution.py arm --arm full --seed 0 --dir .corun --mirror $OUT/rows   # carry .corun
    ... frozen, no_admission seeds 0-2 and no_joint_training seeds 0-1: 11 arm x seed calls
    python bench/coevolution.py collect --dir .corun                                # here, not on the GPU

(after each call, copy $OUT/rows/* into .corun/rows/ and append $OUT/probes/probes.jsonl's
new line to .corun/probes.jsonl here). Keep every arm of a seed, and the role record it
relies on, on one kind of card: the role record is per card kind and UTC day, and a call
on a card or day without one judges the RL and held-out variants first (about 25 kernels,
1-2 minutes). A model with its optimizer state is too large to carry back, so an arm
resumes from its checkpoint only on the machine that wrote it (a warm machine keeps the
ignored .corun/work); an arm stopped by its time budget keeps its rows and resumes there.

Time per arm x seed on one H200, estimated from bench/results/learning_run_h200.json
(7.2 ms per token position of a batch's longest reply; a correct new kernel about 3.3 s of
evaluator throughput): per step five sampling rounds (selection, turn 1, turn 2,
summaries, verification) about 27 s, the fresh verification about 10-15 s, the update and
a checkpoint about 3 s; dynamic sampling (on, as the release has it) may resample a step's
zero-advantage groups; the held-out evaluation every 2 steps (8 samples per task) about
10 s: 45-60 s a step, 8 steps, plus about 40 s to start and the final evaluation (3 x 64
samples with the library, 3 x 64 without for full: about 60-100 s). An arm begins no step
that the longest so far would take past 470 s less the final evaluation's reserve (110 s)
from the process start (--budget-s), so a call ends within about 10 minutes; when the
budget cuts steps, the rerun on the same machine continues. The probe: 3 x 16 summaries,
3 greedy turns and 3 x 64 no-skill samples, about 2-3 minutes. The CPU smoke (--tiny: a
512-token-vocabulary model, one RL task (Softmax), one held-out task (LayerNorm), one
practice pair, one step per arm) checks the plumbing only; it admits nothing (16-token
replies, no timing on a CPU) and no claim rests on it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

T_START = time.monotonic()
ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from coevo import protocol as P  # noqa: E402
from coevo.runner import RunError  # noqa: E402
from kernel_variants import usage_exit  # noqa: E402

RESULTS = ROOT / "bench" / "results"
NAME = "coevolution.py"


def _evaluator(p: dict, d: Path):
    """The real evaluator behind the run's verdict book."""
    from coevo.book import VerdictBook
    from coevo.prepare import eval_config

    from davinci_kernel.evaluate import Evaluator

    return VerdictBook(Evaluator(eval_config(p, d)))


def _seed(book, p: dict, d: Path, rec: dict | None) -> None:
    """The variants' verdicts into the book: this card's role record where there is one
    (the verdicts of this card and day), else those ``prepare`` gave (the CPU smoke)."""
    from coevo.catalog import load_tasks
    from coevo.prepare import read_verdicts

    from davinci_kernel.records import EvalResult

    names = list(p["rl_tasks"]) + list(p["heldout_tasks"])
    tasks = {t.name: t for t in load_tasks(names, d, "suite-book")}
    rows = rec["verdicts"] if rec else [r for (t, _), r in read_verdicts(d).items() if t in tasks]
    for row in rows:
        if row["task"] in tasks:
            book.remember(tasks[row["task"]], row["source"], EvalResult.from_dict(row["result"]))


class _Lazy:
    """The run's verdict book, made on first use (a command refused by its checks starts no
    evaluator); closed at the end only when made here."""

    def __init__(self, p: dict, d: Path, book=None):
        self.p, self.d, self.book, self.own = p, d, book, book is None

    def __call__(self):
        if self.book is None:
            self.book = _evaluator(self.p, self.d)
        return self.book

    def close(self) -> None:
        if self.own and self.book is not None:
            self.book.close()


def _probe_went(p: dict, d: Path) -> None:
    """An arm starts only after the run folder's last probe said go (when the protocol
    requires it)."""
    from coevo.report import read_probes

    if not p["probe"]["required"]:
        return
    probes = read_probes(d)
    if not probes:
        raise RunError(f"no probe in {d / 'probes.jsonl'}: run the probe command first; nothing was started")
    if not probes[-1]["go"]:
        raise RunError(f"the last probe ({probes[-1]['date']}, {probes[-1]['card']}) said no-go: change the SFT data "
                       "(bench/coevo/sftdata.py), prepare a new run folder and probe again; nothing was started")


def _checked(p: dict, d: Path, lazy: _Lazy, arm: bool = False):
    """The run folder is of this protocol and the roles hold on this card today (judged
    when not recorded yet): else one line and exit 2, with nothing started. Returns the
    book, seeded with the variants' verdicts, and the role record."""
    from coevo import roles
    from coevo.prepare import check_run_folder

    check_run_folder(p, d)
    if not (d / "sft" / "model").is_dir():
        raise RunError(f"no SFT model in {d / 'sft' / 'model'}: run the prepare command first")
    if arm:
        _probe_went(p, d)
    rec = roles.ensure(p, d, lambda: roles.judge_variants(p, d, lazy().inner))
    book = lazy()
    _seed(book, p, d, rec)
    return book, rec


def cmd_plan(args, p: dict, d: Path) -> None:
    from coevo.prepare import write_plan

    plan = write_plan(p, d)
    print(f"wrote {d / 'run.json'}: {len(plan['arms'])} arm x seed configs")


def cmd_prepare(args, p: dict, d: Path, book=None) -> None:
    from coevo.prepare import export, prepare

    budget = p["budget_s"]["prepare"] if args.budget_s is None else args.budget_s
    own = book is None
    book = book or _evaluator(p, d)
    try:
        prepare(p, d, book.inner, budget_s=budget, t_start=T_START)
    finally:
        if own:
            book.close()
    if args.export:
        export(d, Path(args.export))
        print(f"copied what the probe and the arms need into {args.export}")


def cmd_probe(args, p: dict, d: Path, book=None) -> dict:
    from coevo import probe, roles
    from coevo.catalog import catalogue, distractors, load_tasks
    from coevo.prepare import read_verdicts

    from davinci_kernel.files import append_jsonl

    lazy = _Lazy(p, d, book)
    try:
        book, rec = _checked(p, d, lazy)
        cat = catalogue(p)
        names = list(p["rl_tasks"]) + list(p["heldout_tasks"])
        tasks = {t.name: t for t in load_tasks(names, d, "suite-probe")}
        speeds = {(r["task"], r["variant"]): r["result"]["speedup"] for r in rec["verdicts"]} if rec else {
            k: v["result"]["speedup"] for k, v in read_verdicts(d).items()}
        backend = probe.backend_of(d / "sft" / "model", p)
        got = probe.measure(p, backend, book, tasks, cat, [s["name"] for s in distractors()], speeds)
    finally:
        lazy.close()
    from kernel_variants import gpu_name

    entry = probe.entry(p, got, roles.card_kind(), gpu_name())
    append_jsonl(d / "probes.jsonl", [entry])
    if args.mirror:
        Path(args.mirror).mkdir(parents=True, exist_ok=True)
        append_jsonl(Path(args.mirror) / "probes.jsonl", [entry])
    print(f"probe: summary share {entry['summary_share']:.2f}, greedy with skill fast "
          f"{entry['greedy_with_skill_fast_share']:.2f}, no-skill fast {entry['noskill_fast_share']:.2f}: "
          f"{'GO' if entry['go'] else 'NO-GO'}")
    for line in entry["why"] + entry.get("change", []):
        print(f"  {line}")
    return entry


def cmd_arm(args, p: dict, d: Path, book=None, arm: str | None = None, seed: int | None = None) -> dict:
    from coevo.catalog import catalogue
    from coevo.runner import ArmRun

    arm, seed = arm or args.arm, args.seed if seed is None else seed
    budget = p["budget_s"]["arm"] if args.budget_s is None else args.budget_s
    lazy = _Lazy(p, d, book)
    try:
        book, _ = _checked(p, d, lazy, arm=True)
        run = ArmRun(p, d, arm, seed, book, catalogue(p), mirror=Path(args.mirror) if args.mirror else None,
                     budget_s=budget, restart=args.restart, t_start=T_START if lazy.own else time.monotonic())
        return run.run()
    finally:
        lazy.close()


def cmd_collect(args, p: dict, d: Path) -> None:
    from coevo import report

    doc = report.collect(d)
    name = "tiny" if args.tiny else doc["card"]
    out = Path(args.out) if args.out else RESULTS / f"coevolution_{name}.json"
    doc = report.with_earlier_probes(doc, report.read_json(out) if out.is_file() else None)
    pngs = report.write(doc, out)
    print("\n".join(report.table(doc)))
    print("\n".join(report.describe(doc["tests"])))
    if not args.tiny and not args.out:
        page = ROOT / "docs" / "coevolution.md"
        if report.fill_docs(doc, out.name, page):
            print(f"filled the verdicts of {page.relative_to(ROOT)}")
    print(f"wrote {out} and {len(pngs)} PNG(s)")


def cmd_check(args, p: dict, d: Path) -> None:
    import json

    from coevo import prereg, report

    path = Path(args.json)
    if not path.is_file():
        raise RunError(f"no result JSON at {path}")
    doc = json.loads(path.read_text())
    finals: dict = {}
    for run in doc.get("runs", []):
        if run.get("final"):
            finals.setdefault(run["arm"], {})[run["seed"]] = run["final"]
    print("\n".join(report.describe(prereg.run_all(doc["rows"], finals, doc["protocol"]))))


def cmd_all(args, p: dict, d: Path) -> None:
    book = _evaluator(p, d)
    try:
        cmd_prepare(args, p, d, book=book)
        cmd_probe(args, p, d, book=book)
        for arm, seed in P.all_seeds(p):
            cmd_arm(args, p, d, book=book, arm=arm, seed=seed)
    finally:
        book.close()
    cmd_collect(args, p, d)


COMMANDS = {"plan": cmd_plan, "prepare": cmd_prepare, "probe": cmd_probe, "arm": cmd_arm, "collect": cmd_collect,
            "check": cmd_check, "all": cmd_all}


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=tuple(COMMANDS))
    ap.add_argument("json", nargs="?", help="check: the result JSON")
    ap.add_argument("--dir", default=str(ROOT / ".corun"), help="the run folder (carried into device calls)")
    ap.add_argument("--arm", choices=P.ARMS, help="arm: which arm")
    ap.add_argument("--seed", type=int, help="arm: which seed (one of the protocol's)")
    ap.add_argument("--mirror", help="arm: also write the rows file into this folder after every step; probe: "
                    "also append the record to this folder's probes.jsonl")
    ap.add_argument("--export", help="prepare: copy what the arms need into this folder")
    ap.add_argument("--budget-s", type=float, help="prepare/arm: seconds from process start that the command keeps "
                    "within (0: none; default: the protocol's)")
    ap.add_argument("--restart", action="store_true", help="arm: an unfinished rows file that cannot be resumed is "
                    "kept as <name>.attempt-N.json and the arm starts over")
    ap.add_argument("--out", help="collect: the result JSON (default bench/results/coevolution_<card>.json, and the "
                    "verdicts into docs/coevolution.md)")
    ap.add_argument("--tiny", action="store_true", help="the CPU smoke's protocol: a tiny model, one RL task, one "
                    "held-out task, one step per arm")
    args = ap.parse_args(argv)
    p = P.protocol(args.tiny)
    if args.command == "arm" and (args.arm is None or args.seed is None):
        usage_exit(NAME, "arm needs --arm and --seed")
    if args.command == "arm" and args.seed not in p["seeds"][args.arm]:
        usage_exit(NAME, f"--seed must be one of the protocol's seeds for {args.arm}: {p['seeds'][args.arm]}")
    if args.command == "check" and not args.json:
        usage_exit(NAME, "check needs the result JSON: coevolution.py check PATH")
    if args.budget_s is not None and args.budget_s < 0:
        usage_exit(NAME, "--budget-s must be >= 0")
    return args, p


def main(argv=None) -> None:
    args, p = parse(argv)
    from davinci_kernel.errors import UsageError
    from davinci_kernel.locks import hold

    d = Path(args.dir).resolve()
    try:
        if args.command == "check":
            cmd_check(args, p, d)
            return
        d.mkdir(parents=True, exist_ok=True)
        with hold(d / ".coevolution.lock", f"coevolution.py {args.command}"):
            COMMANDS[args.command](args, p, d)
    except (RunError, UsageError, FileNotFoundError) as e:
        usage_exit(NAME, str(e))
    except KeyboardInterrupt:  # every saved file is whole; the step under way is not recorded
        print(f"{NAME}: interrupted during {args.command}; a rerun continues from what was saved", file=sys.stderr)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(130)  # evaluations still in flight on other threads are not waited for


if __name__ == "__main__":
    main()
