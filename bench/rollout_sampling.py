"""Rollout sampling throughput: the trainer's in-process sampler on the built-in tasks' prompts.

During ``dvk train rl`` with ``rl.env=rollout`` the model being trained writes every
selection, policy and summary reply (``RolloutEnv._backend`` → ``rl/local_gen.py``
``LocalBackend``: float32 master weights under bf16 autocast, batches of
``rollout.gen_batch``). This benchmark times sampling on real first-turn policy prompts
(each built-in task with two seed skills, as the policy agent renders them) with the
randomly initialised ~0.5B Qwen3 of ``rl_step.py`` (and its tokenizer trained on our own
kernel text), side by side:

- ``hf_sdpa``: transformers ``generate`` with its own attention (the baseline: up to 5.22
  its ``sdpa`` repeats the grouped key/value heads of the whole cache at every sampled
  token of a padded batch);
- ``hf``: ``generate`` with single-token steps through ``llm/grouped_decode.py`` (``HFBackend``);
- ``hf_chunk``: the same with the prompt encoded 1024 tokens at a time (``prefill_chunk``);
- ``local``: as the trainer samples (``LocalBackend``: own decode loop, sampling on the device).
- ``local_cudnn``: the same, with PyTorch free to send attention to cuDNN (what sampling did
  before it kept attention off cuDNN: a new cuDNN plan per decode step's key length).

Per variant: wall time, generated tokens/s, failed requests with the first error, and
peak GPU memory. Writes ``bench/results/rollout_sampling.json`` and prints a table. Not a test.

    python bench/rollout_sampling.py                       # H200: about 2 minutes
    python bench/rollout_sampling.py --tiny --n 4 --new 8  # CPU smoke of the same code path
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from rl_step import QWEN3_05B, TINY, _profile, _sync, build_model_dir  # noqa: E402

import davinci_kernel.llm.grouped_decode as grouped_decode_mod  # noqa: E402
from davinci_kernel.agents.policy import first_messages  # noqa: E402
from davinci_kernel.llm.base import GenRequest  # noqa: E402
from davinci_kernel.llm.hf_backend import HFBackend  # noqa: E402
from davinci_kernel.rl.local_gen import LocalBackend  # noqa: E402
from davinci_kernel.rl.modeling import load_model, load_tokenizer  # noqa: E402
from davinci_kernel.skills.seed_build import load_sources  # noqa: E402
from davinci_kernel.tasks.loader import load_suite  # noqa: E402

VARIANTS = ("hf_sdpa", "hf", "hf_chunk", "local", "local_cudnn")


def policy_prompts(n: int) -> list[list[dict]]:
    tasks = load_suite("builtin")
    skills = [s for s, _, _ in load_sources()]
    return [first_messages(tasks[i % len(tasks)], skills[(2 * i) % len(skills):(2 * i) % len(skills) + 2])
            for i in range(n)]


def run_variant(name: str, model, tok, prompts, args) -> dict:
    cast = torch.bfloat16 if torch.cuda.is_available() else None
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    _sync()
    t0 = time.perf_counter()
    reqs = [GenRequest(m, temperature=1.0, max_new_tokens=args.new, seed=i) for i, m in enumerate(prompts)]
    if name in ("local", "local_cudnn"):
        b = LocalBackend(model, tok, max_batch=args.batch, autocast=cast)
    else:
        b = HFBackend(model=model, tokenizer=tok, max_batch=args.batch, autocast=cast,
                      prefill_chunk=1024 if name == "hf_chunk" else 0, grouped=name != "hf_sdpa")
    # in this thread (the trainer runs it in a worker thread): the profiler sees its ops
    cudnn = name == "local_cudnn"  # the same loop with PyTorch free to send attention to cuDNN again
    with mock.patch.object(grouped_decode_mod, "_no_cudnn_attention", contextlib.nullcontext) if cudnn \
            else contextlib.nullcontext():
        outs = b.generate_blocking(reqs)
    _sync()
    wall = time.perf_counter() - t0
    errors = [c.error for c in outs if c.error]
    tokens = sum(len(c.token_ids or []) for c in outs)
    return {"variant": name, "wall_s": wall, "gen_tokens": tokens, "tokens_per_s": tokens / wall,
            "failed": len(errors), "first_error": errors[0] if errors else None,
            "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=64, help="requests (first-turn policy prompts)")
    ap.add_argument("--batch", type=int, default=64, help="sequences per generate call (rollout.gen_batch)")
    ap.add_argument("--new", type=int, default=256, help="max new tokens per request")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--tiny", action="store_true", help="a CPU-sized model")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "rollout_sampling.json"))
    ap.add_argument("--profile", default="", metavar="DIR",
                    help="also run each variant once more under torch.profiler (--profile-new tokens); op "
                         "tables by device and host time go to DIR")
    ap.add_argument("--profile-new", type=int, default=16)
    args = ap.parse_args()
    names = [v for v in args.variants.split(",") if v]
    bad = [v for v in names if v not in VARIANTS]
    if bad or not names or args.n < 1 or args.batch < 1 or args.new < 1:
        print(f"rollout_sampling.py: --variants takes {', '.join(VARIANTS)}; --n, --batch, --new > 0",
              file=sys.stderr)
        sys.exit(2)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        path = build_model_dir(Path(tmp) / "model", TINY if args.tiny else QWEN3_05B)
        tok = load_tokenizer(path)
        model = load_model(path, bf16=False, grad_checkpointing=True).to(dev).train()  # as the trainer holds it
        prompts = policy_prompts(args.n)
        texts = [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in prompts]
        lens = [len(t) for t in texts]
        plen = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
        result = {"device": torch.cuda.get_device_name(0) if dev == "cuda"
                  else f"CPU, {os.cpu_count()} cores ({platform.machine()})",
                  "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
                  "model": "tiny" if args.tiny else "qwen3-0.5B shape, random init, float32 weights, bf16 autocast",
                  "requests": args.n, "batch": args.batch, "max_new_tokens": args.new,
                  "prompt_chars_mean": sum(lens) / len(lens), "prompt_tokens_mean": sum(plen) / len(plen),
                  "prompt_tokens_max": max(plen), "variants": []}
        out = Path(args.out)
        for name in names:
            short = argparse.Namespace(**{**vars(args), "new": args.profile_new})
            _profile(lambda name=name, short=short: run_variant(name, model, tok, prompts, short), name, args)  # with --profile
            result["variants"].append(run_variant(name, model, tok, prompts, args))
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(result, indent=2))
    print(f"{args.n} prompts, mean {result['prompt_tokens_mean']:.0f} / max {result['prompt_tokens_max']} tokens, "
          f"batch {args.batch}, {args.new} new tokens")
    print(f"{'variant':<10}{'wall s':>9}{'tokens':>9}{'tok/s':>9}{'failed':>8}{'peak GiB':>10}  first error")
    for r in result["variants"]:
        print(f"{r['variant']:<10}{r['wall_s']:>9.2f}{r['gen_tokens']:>9}{r['tokens_per_s']:>9.0f}{r['failed']:>8}"
              f"{(r['peak_mem_gib'] or 0):>10.1f}  {r['first_error'] or ''}")
    base = next((r for r in result["variants"] if r["variant"] == "hf_sdpa" and r["gen_tokens"]), None)
    for r in result["variants"]:
        if base is not None and r is not base and r["gen_tokens"]:
            print(f"{r['variant']} / hf_sdpa tokens/s: {r['tokens_per_s'] / base['tokens_per_s']:.2f}x")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
