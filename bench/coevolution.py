"""The co-evolution experiment: skills admitted by execution during RL, then selected and
used, against arms without them, on our own kernel variants with a model trained here.

The protocol (tasks, kernels and their roles, SFT mix, model, RL settings, arms, seeds,
steps, budgets, success criteria) is ``bench/coevo/protocol.py``'s ``PROTOCOL``; it is
written into ``run.json`` and into the result JSON's ``protocol``. Commands, each resumable
(what is saved is kept; a rerun continues):

    prepare   run.json (every arm x seed's full config); every kernel judged by the real
              evaluator (verdicts.jsonl, variants.json); the SFT data (sft.jsonl: evaluation
              tasks' turn 1 slow/medium/wrong only, turn 2 fast 40 % after "correct, make it
              faster"; practice tasks for following a skill, summarizing, selecting); a 4.0M
              Qwen3-shaped model trained from random init (sft/model, 15.3 MiB in float32)
    arm       ONE arm x seed start to finish: RL steps of the real pipeline (T=2, k=2 + null
              scheme, n=4, s=2, empty library at step 0, thresholds 1.2/1.2, every admission
              re-timed in a fresh evaluation), one row per step in DIR/rows/<arm>-s<seed>.json
              (also written into --mirror); for the full arm, the final library on vs off
    collect   every rows file -> bench/results/coevolution_h200.json (+ .png), a table and
              the success criteria, PASS/FAIL with their numbers
    check     the success criteria over a result JSON
    plan      run.json only (the arms' configs, for inspection)
    all       prepare, every arm x seed and collect in one process (the --tiny CPU smoke)

The H200 plan: one device call per command below, each under 10 minutes; the run folder
.corun (about 20 MiB: the SFT model, the verdicts, run.json, the SFT data) is carried in, and
only the rows come back (a model with its optimizer state is too large to carry back):

    python bench/coevolution.py prepare --dir .corun --export $OUT/corun          # no carry
    python bench/coevolution.py arm --arm full --seed 0 --dir .corun --mirror $OUT/rows   # carry .corun
    ... the same for no_admission, frozen, no_joint_training and seed 1 (8 calls)
    python bench/coevolution.py collect --dir .corun                                # here, not on the GPU

Time per arm x seed on one H200, estimated from bench/results/learning_run_h200.json: its
batched sampling took about 7.2 ms per token position of a batch's longest reply (128 replies
of up to 1151 tokens in 8.3 s); sources it had not judged before cost it almost nothing to
judge (broken code fails the static checks at once); a correct new kernel costs the
evaluator about 10-15 s alone and about 3.3 s of throughput (about 18 a minute with 4
workers). This protocol per step: five sampling rounds (selection, turn 1, turn 2,
summaries, verification re-generations) over replies of at most about 800 policy tokens
and 1000 summary tokens, about 27 s together; the fresh verification of about one skill
per task (two summaries of one episode mostly propose the same skill, and a source given
twice in one fresh call is judged once), about 10-15 s; the update and a checkpoint, about
3 s: 40-50 s a step, 320-400 s for the 8 steps, plus about 40 s to start (Python, model,
evaluator) and 30 s for the final on/off comparison: about 7 minutes. The arm begins no step
that the longest so far would take past 470 s from the process start (--budget-s), so a
call ends within about 9 minutes even when steps run slower than estimated; an arm stopped
by the budget keeps its rows and says so ("stopped"). The CPU smoke (--tiny: a
512-token-vocabulary model, one task, one step) takes 1 to 1.5 minutes on 2 cores, most of
it starting evaluator workers, the SFT and the four trainers.
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
    """The real evaluator behind the run's verdict book, seeded with ``verdicts.jsonl``."""
    from coevo.book import VerdictBook
    from coevo.prepare import eval_config

    from davinci_kernel.evaluate import Evaluator

    return _seed(VerdictBook(Evaluator(eval_config(p, d))), p, d)


def _seed(book, p: dict, d: Path):
    """Every verdict ``prepare`` gave a kernel of an evaluation task, into the book."""
    from coevo.prepare import read_verdicts
    from kernel_variants import load_tasks

    from davinci_kernel.records import EvalResult

    verdicts = read_verdicts(d)
    if verdicts:
        tasks = {t.name: t for t in load_tasks(p["eval_tasks"], d, "suite-book")}
        for (task, _), row in verdicts.items():
            if task in tasks:
                book.remember(tasks[task], row["source"], EvalResult.from_dict(row["result"]))
    return book


def cmd_plan(args, p: dict, d: Path) -> None:
    from coevo.prepare import write_plan

    plan = write_plan(p, d)
    print(f"wrote {d / 'run.json'}: {len(plan['arms'])} arm x seed configs")


def cmd_prepare(args, p: dict, d: Path, book=None) -> None:
    from coevo.book import VerdictBook
    from coevo.prepare import eval_config, export, prepare

    from davinci_kernel.evaluate import Evaluator

    budget = p["budget_s"]["prepare"] if args.budget_s is None else args.budget_s
    own = book is None
    book = book or VerdictBook(Evaluator(eval_config(p, d)))
    try:
        prepare(p, d, book.inner, budget_s=budget, t_start=T_START)
    finally:
        if own:
            book.close()
    if args.export:
        export(d, Path(args.export))
        print(f"copied what the arms need into {args.export}")


def cmd_arm(args, p: dict, d: Path, book=None, arm: str | None = None, seed: int | None = None) -> dict:
    from coevo.runner import ArmRun
    from coevo.sftdata import catalogue

    arm, seed = arm or args.arm, args.seed if seed is None else seed
    if arm not in p["arms"]:
        raise RunError(f"--arm must be one of {', '.join(p['arms'])}")
    if not (d / "sft" / "model").is_dir():
        raise RunError(f"no SFT model in {d / 'sft' / 'model'}: run the prepare command first")
    budget = p["budget_s"]["arm"] if args.budget_s is None else args.budget_s
    own = book is None
    book = book or _evaluator(p, d)
    try:
        run = ArmRun(p, d, arm, seed, book, catalogue(p), mirror=Path(args.mirror) if args.mirror else None,
                     budget_s=budget, restart=args.restart, t_start=T_START if own else time.monotonic())
        return run.run()
    finally:
        if own:
            book.close()


def cmd_collect(args, p: dict, d: Path) -> None:
    from coevo import report

    doc = report.collect(d)
    out = Path(args.out) if args.out else RESULTS / f"coevolution_{'tiny' if args.tiny else 'h200'}.json"
    png = report.write(doc, out)
    print("\n".join(report.table(doc)))
    print("\n".join(report.describe(doc["success"])))
    print(f"wrote {out} and {png.name}")


def cmd_check(args, p: dict, d: Path) -> None:
    import json

    from coevo import report

    path = Path(args.json)
    if not path.is_file():
        raise RunError(f"no result JSON at {path}")
    print("\n".join(report.describe(report.success(json.loads(path.read_text())))))


def cmd_all(args, p: dict, d: Path) -> None:
    book = _evaluator(p, d)
    try:
        cmd_prepare(args, p, d, book=book)
        _seed(book, p, d)  # with what prepare judged
        for seed in p["seeds"]:
            for arm in p["arms"]:
                cmd_arm(args, p, d, book=book, arm=arm, seed=seed)
    finally:
        book.close()
    cmd_collect(args, p, d)


COMMANDS = {"plan": cmd_plan, "prepare": cmd_prepare, "arm": cmd_arm, "collect": cmd_collect, "check": cmd_check,
            "all": cmd_all}


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=tuple(COMMANDS))
    ap.add_argument("json", nargs="?", help="check: the result JSON")
    ap.add_argument("--dir", default=str(ROOT / ".corun"), help="the run folder (carried into device calls)")
    ap.add_argument("--arm", choices=P.ARMS, help="arm: which arm")
    ap.add_argument("--seed", type=int, help="arm: which seed (one of the protocol's)")
    ap.add_argument("--mirror", help="arm: also write the rows file into this folder after every step")
    ap.add_argument("--export", help="prepare: copy what the arms need into this folder")
    ap.add_argument("--budget-s", type=float, help="prepare/arm: seconds from process start that the command keeps "
                    "within (0: none; default: the protocol's)")
    ap.add_argument("--restart", action="store_true", help="arm: an unfinished rows file that cannot be resumed is "
                    "kept as <name>.attempt-N.json and the arm starts over")
    ap.add_argument("--out", help="collect: the result JSON (default bench/results/coevolution_h200.json)")
    ap.add_argument("--tiny", action="store_true", help="the CPU smoke's protocol: a tiny model, one task, one step")
    args = ap.parse_args(argv)
    p = P.protocol(args.tiny)
    if args.command == "arm" and (args.arm is None or args.seed is None):
        usage_exit(NAME, "arm needs --arm and --seed")
    if args.command == "arm" and args.seed not in p["seeds"]:
        usage_exit(NAME, f"--seed must be one of the protocol's seeds {p['seeds']}")
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
