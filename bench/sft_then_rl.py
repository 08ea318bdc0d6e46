"""SFT cold start, then RL on the real pipeline, from a randomly initialised ~0.5B Qwen3.

The method's order on one GPU, measured: (1) SFT data — for every built-in task, its
first-turn policy prompt (no skills, as the null scheme renders it) answered with the
task's own reference kernel in a ```python block, written as OpenAI-format JSONL;
(2) ``dvk train sft`` on it (``rl/sft.py``: diversity filter, assistant-only loss, packed
micro-batches, bf16 autocast) until the model has the kernels by heart; (3) ``dvk train rl``
steps (``rl/trainer.py``) from the SFT model on the built-in suite with the real evaluator:
the model samples policy turns, the harness compiles, checks and times them, rewards →
TRLOO advantages → PRS → update. A random model writes nothing correct (every advantage is
0, nothing to update); after the SFT the samples differ in correctness and speed, so the
update has work to do.

Per phase: time, tokens/s, SFT loss; per RL step: generation (sampling + evaluation) and
update time (and of the generation, the sampling), update tokens/s, correct fraction,
mean reward. Writes ``bench/results/sft_then_rl.json`` after every phase and step, and
prints a line for each. Not a test.

    python bench/sft_then_rl.py                 # H200: about 8 minutes (2 RL steps of 2 turns)
    python bench/sft_then_rl.py --rl-steps 1 --turns 1 --rollouts 8 --new 768
                                                # the committed run: 4.5 minutes
    python bench/sft_then_rl.py --tiny          # CPU smoke of the same code path (nothing correct)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from rl_step import QWEN3_05B, TINY, build_model_dir, trainer_steps  # noqa: E402

from davinci_kernel.agents.policy import first_messages  # noqa: E402
from davinci_kernel.config import load_config  # noqa: E402
from davinci_kernel.files import read_jsonl, write_json  # noqa: E402
from davinci_kernel.tasks.loader import candidate_path, load_suite, reference_dir  # noqa: E402


def write_sft_data(path: Path, language: str = "triton") -> int:
    """One conversation per built-in task: its first policy prompt → its reference kernel."""
    n = 0
    with path.open("w") as f:
        for task in load_suite("builtin"):
            ref = candidate_path(reference_dir("builtin"), task)
            if not ref.is_file():
                continue
            reply = "```python\n" + ref.read_text().strip() + "\n```"
            msgs = first_messages(task, (), language) + [{"role": "assistant", "content": reply}]
            f.write(json.dumps({"messages": msgs, "task": task.name}) + "\n")
            n += 1
    return n


def _read_metrics(path: Path) -> list[dict]:
    return read_jsonl(path) if path.is_file() else []


def _epoch_losses(ms: list[dict]) -> dict[int, float]:
    """The last step's loss of every epoch (about a dozen epochs, evenly spread, and the last)."""
    last = {m["epoch"]: m["loss"] for m in ms}
    every = max(1, len(last) // 12)
    return {e + 1: v for e, v in last.items() if e % every == 0 or e == max(last)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sft-epochs", type=int, default=60)
    ap.add_argument("--sft-lr", type=float, default=3e-4)
    ap.add_argument("--rl-steps", type=int, default=2)
    ap.add_argument("--batch-tasks", type=int, default=4)
    ap.add_argument("--rollouts", type=int, default=4, help="policy rollouts per task (null scheme only)")
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--new", type=int, default=1024, help="max new tokens per reply")
    ap.add_argument("--temperature", type=float, default=0.7,
                    help="sampling temperature of the RL rollouts (the recipes use 1.0)")
    ap.add_argument("--tiny", action="store_true", help="a CPU-sized model and a few tokens (code path only)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "sft_then_rl.json"))
    args = ap.parse_args()
    if min(args.sft_epochs, args.rl_steps, args.batch_tasks, args.rollouts, args.turns, args.new) < 1:
        print("sft_then_rl.py: --sft-epochs, --rl-steps, --batch-tasks, --rollouts, --turns and --new must be >= 1",
              file=sys.stderr)
        sys.exit(2)
    if args.tiny:
        args.sft_epochs, args.rl_steps, args.new, args.batch_tasks, args.rollouts = 1, 1, 8, 1, 2
    from davinci_kernel.rl.sft import train_sft

    result = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available()
              else f"CPU, {os.cpu_count()} cores ({platform.machine()})",
              "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
              "model": "tiny" if args.tiny else "Qwen3 0.5B shape (24 layers, hidden 1024, 16/8 heads), random init; "
                                                "BPE tokenizer trained on this package's own kernel text",
              "settings": {k: v for k, v in vars(args).items() if k != "out"}}
    out = Path(args.out)

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_json(out, result)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = build_model_dir(tmp / "base", TINY if args.tiny else QWEN3_05B)
        data = tmp / "sft.jsonl"
        n = write_sft_data(data)
        bf16 = str(torch.cuda.is_available()).lower()
        cfg = load_config(ROOT / "configs" / "tiny-cpu.yaml", [
            f"sft.model=hf:{base}", f"sft.data=[{data}]", f"sft.epochs={args.sft_epochs}", f"sft.lr={args.sft_lr}",
            "sft.max_seq_len=8192", "sft.batch_rows=1", f"sft.bf16={bf16}", "sft.grad_checkpointing=true"])
        t0 = time.perf_counter()
        sft = train_sft(cfg, out=str(tmp / "sft"))
        wall = time.perf_counter() - t0
        ms = _read_metrics(tmp / "sft" / "metrics.jsonl")
        tokens, busy = sum(m.get("tokens", 0) for m in ms), sum(m.get("step_s", 0) for m in ms)
        result["sft"] = {"examples": n, "kept": sft["samples"], "rows": sft["rows"], "optimizer_steps": sft["steps"],
                         "epochs": args.sft_epochs, "wall_s": wall, "loss_tokens": tokens,
                         "tokens_per_s": tokens / busy if busy else None,
                         "loss_first": ms[0]["loss"] if ms else None, "loss_last": sft["loss"],
                         "loss_by_epoch": _epoch_losses(ms)}
        save()
        print(f"sft: {n} examples, {sft['steps']} steps in {wall:.0f}s, loss {result['sft']['loss_first']:.3f} → "
              f"{sft['loss']:.4f}")

        rl_cfg = load_config(ROOT / "configs" / "tiny-cpu.yaml", [
            f"rl.model=hf:{tmp / 'sft' / 'model'}", "rl.env=rollout", "rl.suite=builtin", f"rl.steps={args.rl_steps}",
            "rl.eval_every=0", f"rl.bf16={bf16}", "rl.grad_checkpointing=true", "rl.micro_batch_tokens=16384",
            "rl.lr=1e-6", f"rl.batch_tasks={args.batch_tasks}", "rollout.k_schemes=0",
            f"rollout.n_rollouts={args.rollouts}", f"rollout.turns={args.turns}", "rollout.s_summaries=2",
            f"rollout.max_new_tokens={args.new}", f"rollout.temperature={args.temperature}",
            f"eval.cache_dir={tmp / 'eval-cache'}", f"skills.db={tmp / 'skills.db'}"])

        def step_done(part: dict) -> None:
            result["rl"] = part
            save()
            r = part["steps"][-1]
            print(f"rl step {len(part['steps'])}: {r['step_s']:.1f}s (generation + evaluation {r['gen_s']:.1f}s, of "
                  f"it sampling {r['sample_s'] or 0:.1f}s; update {r['update_s']:.2f}s, {r['update_tokens']} tokens), "
                  f"correct {r['correct/policy']:.2f}, reward {r['reward/policy']:.3f}, "
                  f"{r['gen_errors']:.0f} failed calls")

        result["rl"] = trainer_steps(rl_cfg, tmp / "rl", args.rl_steps, step_done)
        save()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
