"""Rollout overhead: wall time of a task group minus generation and kernel-evaluation time.

A full training task group (k selection samples + the null scheme, n rollouts, T turns,
summaries when triggered) runs on an elementwise task with a tiny Qwen3-architecture
model built locally (``davinci_kernel.llm.tiny``) on the local transformers backend.
The tiny model really generates (``--max-new-tokens`` tokens per call: that is the
generation time), then its text is replaced by a scripted reply — a selection call, a
correct Triton kernel or one that fails at run time — so every turn reaches the real
evaluator (the kernel time). What remains of the wall time is the rollout's own cost:
prompt building, parsing, records, rewards, scheduling. Target: ≤ 5 % of the group.

Generation and evaluation never overlap inside one group, so the subtraction is exact.
Writes bench/results/rollout_overhead.json (GPU, torch version, date) and prints a table.

Usage: python bench/rollout_overhead.py [--device cuda] [--k 3 --n 4 --turns 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from davinci_kernel.config import EvalConfig, RewardConfig, RolloutConfig, SkillsConfig
from davinci_kernel.evaluate import Evaluator
from davinci_kernel.llm.base import Backend, GenRequest
from davinci_kernel.llm.hf_backend import HFBackend
from davinci_kernel.llm.tiny import build_tiny
from davinci_kernel.records import Completion, Skill, Task
from davinci_kernel.rollout import Context, GroupPlan, run_group
from davinci_kernel.skills.admit import Admission
from davinci_kernel.skills.store import SkillStore

OUT = Path(__file__).resolve().parent / "results" / "rollout_overhead.json"

TASK_SOURCE = '''import torch
import torch.nn as nn

batch_size = 4096
dim = 4096
CPU_SHAPES = {"batch_size": 8, "dim": 300}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, {expr}, mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), {block}),)](x, y, x.numel(), BLOCK={block})
        return y
'''

SELECT = ('<tool_call>{"name": "select_skills", "arguments": {"think": "memory bound", '
          '"selected_skills": [{"name": "mask_tails", "reason": "elementwise"}]}}</tool_call>')


def scripted_text(req: GenRequest, i: int) -> str:
    system = req.messages[0]["content"]
    if "You pick optimization skills" in system:
        return SELECT
    if "You curate a library" in system:
        return '<tool_call>{"name": "update_skill_library", "arguments": {"think": "", "new_skills": []}}</tool_call>'
    turn = sum(1 for m in req.messages if m["role"] == "user")
    if turn == 1 and i % 3 == 2:
        return f"```python\n{KERNEL.format(expr='x + undefined_name', block=1024)}```"
    block = 1024 if turn == 1 else 4096
    return f"Kernel:\n```python\n{KERNEL.format(expr='tl.maximum(x, 0.0)', block=block)}```"


class TinyThenScript(Backend):
    """Real generation by the tiny model (cost, token ids), scripted text (so code runs)."""

    def __init__(self, inner: HFBackend):
        self.inner = inner
        self.name = f"tiny+script({inner.name})"

    async def _generate(self, requests):
        comps = await self.inner.generate(requests)
        return [Completion(text=scripted_text(r, i), token_ids=c.token_ids, logprobs=c.logprobs,
                           prompt_token_ids=c.prompt_token_ids, model=c.model, error=c.error)
                for i, (r, c) in enumerate(zip(requests, comps))]


def one_group(ctx: Context, task: Task, plan: GroupPlan, store) -> dict:
    ctx.stats.__init__()
    t0 = time.perf_counter()
    group = asyncio.run(run_group(ctx, task, plan, store=store, admission=Admission()))
    wall = time.perf_counter() - t0
    s = ctx.stats
    overhead = wall - s.gen_seconds - s.eval_seconds
    turns = sum(len(e.turns) for e in group.episodes)
    return {"wall_s": wall, "gen_s": s.gen_seconds, "eval_s": s.eval_seconds, "overhead_s": overhead,
            "overhead_share": overhead / wall, "model_calls": s.gen_calls, "evaluations": s.eval_calls,
            "policy_turns": turns, "gen_tokens": s.gen_tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()

    import torch

    work = Path(tempfile.mkdtemp(prefix="dvk-bench-"))
    backend = TinyThenScript(HFBackend(str(build_tiny(work / "tiny")), max_batch=64))
    store = SkillStore(work / "lib.db")
    store.add(Skill(name="mask_tails", description="Mask the tail of elementwise loads", tags=["elementwise"],
                    content="## Motivation\nelementwise\n## Key Idea\nmask\n## Example\n```python\nm = offs < n\n```\n"),
              step=0)
    task = Task(name="level1/19_ReLU", level=1, problem_id=19, source=TASK_SOURCE)
    rc = RolloutConfig(k_schemes=args.k, n_rollouts=args.n, turns=args.turns, s_summaries=2,
                       max_new_tokens=args.max_new_tokens)
    plan = GroupPlan(k_schemes=args.k, null_scheme=True, n_rollouts=args.n, turns=args.turns)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs: list[dict] = []

    def report_of(device: str) -> dict:
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]} if runs else {}
        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() and device.startswith("cuda") else "none"
        return {"benchmark": "rollout_overhead", "date": datetime.datetime.now().isoformat(timespec="seconds"),
                "device": device, "gpu": gpu, "torch": torch.__version__, "python": platform.python_version(),
                "k": args.k, "n": args.n, "turns": args.turns, "max_new_tokens": args.max_new_tokens,
                "target_share": 0.05, "median": med, "runs": runs}

    with Evaluator(EvalConfig(device=args.device), workers=args.workers) as ev:
        ctx = Context(backend, ev, rc, RewardConfig(), SkillsConfig())
        one_group(ctx, task, plan, store)  # warm-up: worker start, compilation, baselines
        device = ev.device
        for _ in range(args.repeats):
            runs.append(one_group(ctx, task, plan, store))
            out.write_text(json.dumps(report_of(device), indent=2) + "\n")  # a run cut short keeps its groups
    store.close()
    report = report_of(device)
    med, gpu = report["median"], report["gpu"]
    out.write_text(json.dumps(report, indent=2) + "\n")

    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"rollout overhead, one task group (k={args.k}, n={args.n}, T={args.turns}) on {device} ({gpu})")
    for col in ("run", "wall s", "generation s", "evaluation s", "overhead s", "overhead %", "calls", "evals"):
        t.add_column(col, justify="right")
    for i, r in enumerate(runs + [med]):
        t.add_row("median" if i == len(runs) else str(i + 1), f"{r['wall_s']:.2f}", f"{r['gen_s']:.2f}",
                  f"{r['eval_s']:.2f}", f"{r['overhead_s']:.3f}", f"{100 * r['overhead_share']:.2f}",
                  f"{r['model_calls']:.0f}", f"{r['evaluations']:.0f}")
    Console().print(t)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
