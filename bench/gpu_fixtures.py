"""The cheating fixtures on a GPU, one verdict line each as it comes (``pytest -m gpu`` runs
the same checks; this prints them as they finish, for a device call with a hard limit).

Every fixture is judged with the code policy on (default) and, for those marked
``runtime: yes``, with it off too (the runtime defences alone). Prints one line per
verdict: caught or not, the flags, the error kind; writes JSON to ``$OUT/gpu_fixtures.json``.

    python bench/gpu_fixtures.py [--only NAME,...] [--policy on|off|both] [--workers 4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--policy", default="both", choices=("on", "off", "both"))
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    from conftest import FIXTURES, fixture_meta, fixture_task
    from test_evaluate_cheats import CHEATS, CPU_SHAPED, RUNTIME_GPU, runtime_fixture

    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    only = {n for n in args.only.split(",") if n}
    paths = [p for p in CHEATS if not only or p.stem in only]
    rows = []
    for policy in (["allowlist", "off"] if args.policy == "both" else ["allowlist" if args.policy == "on" else "off"]):
        # with the policy off: the runtime fixtures, or any fixture named in --only (to see
        # whether an attack the policy refuses would get through at run time)
        chosen = [p for p in paths if policy == "allowlist" or only or (runtime_fixture(p) and p in RUNTIME_GPU)]
        cfg = EvalConfig(device="cuda", code_policy=policy, baseline_compile=False)
        t0 = time.time()
        with Evaluator(cfg, workers=args.workers) as ev:
            def report(i, r, chosen=chosen, policy=policy):
                meta = fixture_meta(chosen[i])
                # CPU-shaped fixtures (and hardcoded_shape, whose constant is the CPU's size) are
                # plainly wrong or too slow at a GPU's sizes: any rejection catches them there
                loose = chosen[i].stem in CPU_SHAPED | {"hardcoded_shape"}
                caught = (not r.correct) and (meta["expect"] in r.flags or r.error_kind == meta["expect"] or loose
                                              or (policy == "allowlist" and "policy_violation" in r.flags))
                row = {"fixture": chosen[i].stem, "policy": policy, "expect": meta["expect"], "caught": caught,
                       "correct": r.correct, "flags": r.flags, "error_kind": r.error_kind,
                       "error_msg": (r.error_msg or "")[:400], "coverage": r.coverage, "speedup": r.speedup}
                rows.append(row)
                print(f"{'ok  ' if caught else 'MISS'} {policy:9s} {row['fixture']:34s} expect={meta['expect']:24s} "
                      f"correct={r.correct} flags={','.join(r.flags)} kind={r.error_kind} "
                      f"msg={(r.error_msg or '')[:160]!r}", flush=True)

            ev.evaluate_many([(fixture_task(fixture_meta(p)["task"]), p.read_text()) for p in chosen], progress=report)
        print(f"policy={policy}: {len(chosen)} fixtures in {time.time() - t0:.0f} s", flush=True)
    missed = [r for r in rows if not r["caught"]]
    print(f"caught {len(rows) - len(missed)}/{len(rows)}; missed: {[(r['fixture'], r['policy']) for r in missed]}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gpu_fixtures.json").write_text(json.dumps(rows, indent=1))
    _ = FIXTURES


if __name__ == "__main__":
    main()
