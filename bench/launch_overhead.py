"""Host launch overhead of host-bound models, process by process: a model's eager time
measured in fresh processes after each of the tools the harness runs in a process (the
legacy op profiler of the CPU audit, the kineto profiler with CUDA activity of the kernel
table, a worker's start-up, torch.compile), with CUPTI torn down after profiling
(``TEARDOWN_CUPTI=1``) or not, pinned to one CPU or not; every state in ``--repeat``
processes of its own.

Host-bound models (many small kernels: KernelBench level 3's ResNets, DenseNets, ViT) are
timed by how fast the host launches; anything that slows every launch in a process moves
their times there and nowhere else. The harness compares a reference's time beside a
candidate with its time in the reference process, so both must be measured in the same
state. Prints one table: per state, the median over processes of the ms per call, the
spread over processes (max / min), and the host's enqueue time per call (no sync).

    python bench/launch_overhead.py --kb .kb/KernelBench --repeat 3 --out $OUT/launch_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROBLEMS = ("level3/9_ResNet18.py", "level3/28_VisionTransformer.py", "level1/19_ReLU.py")
# state -> (what the process runs before timing, extra environment, pin to one CPU)
STATES = {
    "fresh": ((), {}, False),
    "fresh, pinned": ((), {}, True),
    "worker_start": (("settle", "warm"), {}, False),
    "worker_start, teardown": (("settle", "warm"), {"TEARDOWN_CUPTI": "1"}, False),
    "worker_start, teardown, pinned": (("settle", "warm"), {"TEARDOWN_CUPTI": "1"}, True),
    "op_profiler_model": (("audit",), {}, False),
    "kineto_model, teardown": (("kineto",), {"TEARDOWN_CUPTI": "1"}, False),
}


def measure(kb: Path, steps: tuple, pin: bool) -> dict:
    """In this process: build the models, run ``steps``, time each model: {problem:
    [event ms per call, host enqueue ms per call]}, and the seconds a kernel table of the
    first model takes after the timing (``profile_after_s``)."""
    import time

    import torch

    from davinci_kernel.evaluate.candidate.worker import warm_gpu_tools
    from davinci_kernel.evaluate.shared import runtime as rt
    from davinci_kernel.evaluate.shared import timing
    from davinci_kernel.evaluate.shared.audit import audited_call, settle
    from davinci_kernel.evaluate.shared.profile import profile_kernels
    from davinci_kernel.evaluate.shared.protocol import TimingSettings

    rt.C = rt.Captured(torch)
    dev = torch.device("cuda")
    torch.empty(1, device=dev)
    rt.C.flush_hold, rt.C.flush_hold_error = rt.build_flush_hold(torch, "cuda")
    models = {}
    for p in PROBLEMS:
        mod = rt.exec_source((kb / p).read_text(), "probe_" + Path(p).stem)
        model = rt.build(mod, "Model", rt.init_args(mod, 0, dev), 0, dev)
        models[p] = (model, [rt.gen_inputs(mod, s, dev) for s in (1, 2)])
    for step in steps:
        for m, sets in models.values():
            if step == "settle":
                settle(torch, "cuda")
            elif step == "warm":
                warm_gpu_tools("cuda")
            elif step == "audit":
                audited_call(torch, m, sets[0])
            elif step == "kineto":
                profile_kernels(rt.C, dev, m, sets[0])
            elif step == "compile":
                with torch.no_grad():
                    torch.compile(m)(*sets[0])
        torch.cuda.synchronize()
    if pin:  # this thread only, after start-up (threads made so far keep their CPUs)
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    kw = TimingSettings().kw()
    out = {}
    for p, (m, sets) in models.items():
        ms = timing.solo(rt.C, dev, m, sets, warmup=3, **kw)
        enqueue = []
        with torch.no_grad():
            for _ in range(10):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                m(*sets[0])
                enqueue.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
        out[p] = [ms, statistics.median(enqueue)]
    m, sets = models[PROBLEMS[0]]
    t0 = time.perf_counter()  # what the kernel table costs after the timing (CUPTI loaded again if torn down)
    profile_kernels(rt.C, dev, m, sets[0])
    out["profile_after_s"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kb", type=Path, required=True, help="KernelBench problems folder (holds level1/ ...)")
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per state")
    ap.add_argument("--out", type=Path, help="JSON of the table")
    ap.add_argument("--state", choices=STATES, help=argparse.SUPPRESS)  # one state, in this process
    args = ap.parse_args()
    missing = [p for p in PROBLEMS if not (args.kb / p).is_file()]
    if missing or args.repeat < 1:
        why = f"no {args.kb / missing[0]}" if missing else "--repeat must be >= 1"
        print(f"launch_overhead.py: {why}", file=sys.stderr)
        sys.exit(2)
    if args.state:
        steps, _, pin = STATES[args.state]
        print("RESULT " + json.dumps(measure(args.kb, steps, pin)))
        return
    import subprocess

    runs: dict[str, list[dict]] = {}
    names = [Path(p).stem[:14] for p in PROBLEMS]
    print(f"{'state':32s} " + " ".join(f"{n:>30s}" for n in names) + "   (median ms, max/min over processes, "
          "host enqueue ms)")
    for state, (_, env, _) in STATES.items():
        for _ in range(args.repeat):
            got = subprocess.run([sys.executable, __file__, "--kb", str(args.kb), "--state", state],
                                 capture_output=True, text=True, env={**os.environ, **env})
            line = next((x for x in got.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                print(f"{state}: failed\n{got.stderr[-800:]}")
                continue
            runs.setdefault(state, []).append(json.loads(line[7:]))
        cells = []
        for p in PROBLEMS:
            ms = [r[p][0] for r in runs.get(state, [])]
            enq = [r[p][1] for r in runs.get(state, [])]
            cells.append(f"{statistics.median(ms):8.3f} x{max(ms) / min(ms):5.2f} {statistics.median(enq):7.3f}"
                         if ms else "-")
        prof = [r["profile_after_s"] for r in runs.get(state, [])]
        print(f"{state:32s} " + " ".join(f"{c:>30s}" for c in cells)
              + (f"   profile after: {max(prof):.2f} s" if prof else ""), flush=True)
    if args.out:
        import datetime

        import torch

        from davinci_kernel.files import write_json

        write_json(args.out, {
            "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "date": datetime.date.today().isoformat(), "problems": PROBLEMS,
            "states": {k: {"steps": list(v[0]), "env": v[1], "pinned": v[2]} for k, v in STATES.items()},
            "runs": runs})


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("launch_overhead.py: interrupted; nothing written", file=sys.stderr)
        sys.exit(130)
