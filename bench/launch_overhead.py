"""Host launch overhead of host-bound models after the tools the harness uses in a process:
a model's eager time measured in a fresh process after each of: nothing, the legacy op
profiler (the CPU audit), the kineto profiler with CUDA activity (the kernel table), a
worker's start-up, torch.compile; each state in a process of its own.

Host-bound models (many small kernels: KernelBench level 3's ResNets, DenseNets, ViT) are
timed by how fast the host launches; anything that slows every launch in a process moves
their times there and nowhere else. The harness compares a reference's time beside a
candidate with its time in the reference process, so both must be measured in the same
state. Prints one table, ms per call and the ratio to fresh.

    python bench/launch_overhead.py --kb .kb/KernelBench --out $OUT/launch_overhead.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROBLEMS = ("level3/9_ResNet18.py", "level3/28_VisionTransformer.py", "level1/19_ReLU.py")
# what a process ran before the timing, each state in a fresh process of its own
STATES = {
    "fresh": (),
    "fresh_again": (),
    "op_profiler_tiny_op": ("settle",),
    "kineto_tiny_op": ("warm",),
    "worker_start": ("settle", "warm"),
    "worker_start+op_profiler_model": ("settle", "warm", "audit"),
    "op_profiler_model": ("audit",),
    "kineto_model": ("kineto",),
    "torch_compile_model": ("compile",),
}


def measure(kb: Path, steps: tuple) -> dict:
    """In this process: build the models, run ``steps``, time each model (ms per call)."""
    import torch

    from davinci_kernel.evaluate import runtime as rt
    from davinci_kernel.evaluate import timing
    from davinci_kernel.evaluate.audit import audited_call, settle
    from davinci_kernel.evaluate.candidate import warm_gpu_tools
    from davinci_kernel.evaluate.profile import profile_kernels
    from davinci_kernel.evaluate.protocol import TimingSettings

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
    kw = TimingSettings().kw()
    return {p: timing.solo(rt.C, dev, m, sets, warmup=3, **kw) for p, (m, sets) in models.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kb", type=Path, required=True, help="KernelBench problems folder (holds level1/ ...)")
    ap.add_argument("--out", type=Path, help="JSON of the table")
    ap.add_argument("--state", choices=STATES, help=argparse.SUPPRESS)  # one state, in this process
    args = ap.parse_args()
    if args.state:
        print("RESULT " + json.dumps(measure(args.kb, STATES[args.state])))
        return
    import subprocess

    rows = {}
    for state in STATES:
        got = subprocess.run([sys.executable, __file__, "--kb", str(args.kb), "--state", state],
                             capture_output=True, text=True)
        line = next((x for x in got.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            print(f"{state}: failed\n{got.stderr[-800:]}")
            continue
        rows[state] = json.loads(line[7:])
        base = rows.get("fresh") or rows[state]
        print(f"{state:32s} " + " ".join(f"{Path(p).stem[:14]:>14s} {rows[state][p]:7.3f} ({rows[state][p] / base[p]:4.2f}x)"
                                         for p in PROBLEMS), flush=True)
    if args.out:
        import datetime

        import torch

        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                        "date": datetime.date.today().isoformat(), "states": {k: list(v) for k, v in STATES.items()}, "ms": rows}, indent=1))


if __name__ == "__main__":
    main()
