"""RL update throughput of the daVinci-kernel trainer on a ~0.5B Qwen3-architecture model.

Builds a randomly initialised Qwen3 from a config (no download), then times real update
steps of ``davinci_kernel.rl.update`` (packed micro-batches by tokens, clipped token-level
policy gradient, AdamW, bf16 autocast, gradient checkpointing) on a synthetic batch of
prompt + completion token ids with random advantages. If ``trl`` is importable, the same
model (same initial weights), batch and sequence lengths go through TRL's GRPO loss
(``GRPOTrainer.compute_loss``, beta = 0) with the same optimizer, for a side-by-side
tokens/s; ours is timed again after TRL, and the ratio uses both of our runs. Optionally
(``--full-steps N``) runs whole trainer steps — generation with the model being trained,
rewards, advantages, update, checkpoint — on the synthetic environment, or on the real
pipeline with ``--env rollout``.

Writes ``bench/results/rl_step.json`` and prints a table. Not a test.

    python bench/rl_step.py                 # H200: about 2-4 minutes
    python bench/rl_step.py --tiny          # CPU smoke of the same code path
    python bench/rl_step.py --layouts padded:fused,padded:chunked,packed --full-steps 0
                                            # log-probs fused vs chunked, and the packed layout
    python bench/rl_step.py --full-steps 0 --profile prof/
                                            # plus one profiled step per side: op tables by device time
    torchrun --nproc_per_node 2 bench/rl_step.py --no-trl --full-steps 0 --out rl_step_ddp2.json
                                            # the same global batch over 2 GPUs (DDP through accelerate)

Under torchrun each process takes every world-th sequence of the same global batch; tokens/s
counts the whole batch, memory is reported per GPU, and rank 0 writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from davinci_kernel.rl.sequences import Sample  # noqa: E402
from davinci_kernel.rl.update import UpdateSettings, update  # noqa: E402

QWEN3_05B = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=24,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                 max_position_embeddings=32768)
SMALL = dict(vocab_size=512, hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, tie_word_embeddings=True, max_position_embeddings=4096)
TINY = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, tie_word_embeddings=True, max_position_embeddings=4096)


def build_model_dir(path: Path, shape: dict, seed: int = 0, tokenizer=None) -> Path:
    """A random-init Qwen3 of ``shape`` and its tokenizer (``tokenizer``, or one trained here)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from davinci_kernel.llm.tiny import project_corpus, train_tokenizer

    # a real-sized vocabulary gets a tokenizer trained on our own kernel text (about 4
    # characters per token on the policy prompts, as code tokenizers give), the small ones 512
    tok = tokenizer or (train_tokenizer(16384, project_corpus()) if shape["vocab_size"] >= 16384
                        else train_tokenizer(512))
    cfg = Qwen3Config(**shape, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_batch(n: int, prompt_len: int, completion_len: int, vocab: int, seed: int = 0) -> list[Sample]:
    g = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = [g.randrange(vocab) for _ in range(prompt_len)]
        comp = [g.randrange(vocab) for _ in range(completion_len)]
        out.append(Sample("policy", prompt, comp, g.uniform(-1.0, 1.0)))
    return out


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def load(path: Path, grad_ckpt: bool):
    from davinci_kernel.rl.modeling import load_model

    model = load_model(path, bf16=True, grad_checkpointing=grad_ckpt)
    model.train()
    return model


def bench_ours(path, samples, args, variant: str = "padded") -> dict:
    """``variant`` = LAYOUT[:LOGPROBS], e.g. "padded" (fused log-probs, the default),
    "packed", "padded:chunked"."""
    layout, _, logprobs = variant.partition(":")
    logprobs = logprobs or "fused"
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    from accelerate import Accelerator

    from davinci_kernel.rl.modeling import mixed_precision

    # bf16 where TRL gets it too (its side uses bf16=torch.cuda.is_available())
    acc = Accelerator(mixed_precision=mixed_precision(torch.cuda.is_available()), cpu=not torch.cuda.is_available())
    model = load(path, not args.no_grad_ckpt)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    model, opt = acc.prepare(model, opt)
    s = UpdateSettings(micro_batch_tokens=args.micro_batch_tokens, minibatches=1, mismatch="off", layout=layout,
                       logprobs=logprobs)
    tokens = sum(x.length for x in samples)  # the global batch
    samples = samples[acc.process_index::acc.num_processes]
    times = []
    for i in range(args.warmup + args.steps):
        _sync()
        t0 = time.perf_counter()
        update(model, opt, samples, s, acc)
        _sync()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
    _profile(lambda: update(model, opt, samples, s, acc), f"ours_{variant}", args)
    out = _summary(f"davinci_kernel {layout} {logprobs}"
                   + (f" DDP x{acc.num_processes}" if acc.num_processes > 1 else ""),
                   times, tokens, peak)
    if acc.num_processes > 1:
        import torch.distributed as tdist

        peaks = [None] * acc.num_processes
        tdist.all_gather_object(peaks, peak)
        out.update(world_size=acc.num_processes, peak_mem_gib_per_gpu=peaks)
    model = opt = None  # release them (a closure above holds these names)
    _free()
    return out


def bench_trl(path, samples, args) -> dict:
    try:
        import trl
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as e:
        return {"skipped": f"trl not importable ({e})"}
    from davinci_kernel.rl.modeling import load_tokenizer

    try:
        torch.cuda.reset_peak_memory_stats() if torch.cuda.is_available() else None
        model = load(path, False)
        if not args.no_grad_ckpt:  # TRL's Trainer turns it on only inside train(); match ours here
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        tok = load_tokenizer(path)
        seq = samples[0].length
        rows = max(1, args.micro_batch_tokens // seq)
        gens = 2 if rows % 2 == 0 else 1
        with tempfile.TemporaryDirectory() as tmp:
            cfg = GRPOConfig(output_dir=tmp, per_device_train_batch_size=rows * gens if gens > 1 else rows,
                             num_generations=max(gens, 2) if rows >= 2 else 2, beta=0.0, learning_rate=1e-6,
                             bf16=torch.cuda.is_available(), gradient_checkpointing=not args.no_grad_ckpt,
                             max_completion_length=len(samples[0].completion_ids), report_to="none",
                             logging_steps=10**9, save_strategy="no")
            ds = Dataset.from_list([{"prompt": "x"}] * 8)
            trainer = GRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                                  args=cfg, train_dataset=ds, processing_class=tok)
            trainer.current_gradient_accumulation_steps = 1  # normally set inside Trainer.train()
            tmodel = trainer.accelerator.prepare(trainer.model)
            opt = trainer.accelerator.prepare(torch.optim.AdamW(tmodel.parameters(), lr=1e-6))
            dev = trainer.accelerator.device
            tokens = sum(x.length for x in samples)
            times = []

            def step() -> None:
                opt.zero_grad(set_to_none=True)
                for start in range(0, len(samples), rows):
                    chunk = samples[start:start + rows]
                    inputs = {
                        "prompt_ids": torch.tensor([x.prompt_ids for x in chunk], device=dev),
                        "prompt_mask": torch.ones(len(chunk), len(chunk[0].prompt_ids), dtype=torch.long, device=dev),
                        "completion_ids": torch.tensor([x.completion_ids for x in chunk], device=dev),
                        "completion_mask": torch.ones(len(chunk), len(chunk[0].completion_ids), dtype=torch.long,
                                                      device=dev),
                        "advantages": torch.tensor([x.advantage for x in chunk], device=dev),
                        "old_per_token_logps": None,
                        "num_items_in_batch": torch.tensor(sum(len(x.completion_ids) for x in samples), device=dev),
                    }
                    loss = trainer.compute_loss(tmodel, inputs)
                    trainer.accelerator.backward(loss * len(chunk) / len(samples))
                trainer.accelerator.clip_grad_norm_(tmodel.parameters(), 1.0)
                opt.step()

            for i in range(args.warmup + args.steps):
                _sync()
                t0 = time.perf_counter()
                step()
                _sync()
                if i >= args.warmup:
                    times.append(time.perf_counter() - t0)
            peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
            _profile(step, "trl", args)
        out = _summary(f"trl {trl.__version__} GRPO loss", times, tokens, peak)
        trainer = tmodel = opt = model = None  # release them (step() holds these names)
        _free()
        return out
    except Exception as e:  # an API drift in TRL is a result to report, not a crash
        _free()
        return {"error": f"{type(e).__name__}: {e}"[:500]}


# what a whole trainer step reports here (rl_step.py --full-steps, sft_then_rl.py)
STEP_KEYS = ("step_s", "gen_s", "sample_s", "update_s", "update_tokens", "update_tokens_per_s", "gen_tokens",
             "gen_errors", "samples", "prs_dropped", "mismatch_dropped", "reward/policy", "reward/best_turn",
             "correct/policy", "speedup/correct", "reward/summary", "skills_admitted", "tasks")


def trainer_steps(cfg, workdir, steps: int, report=lambda part: None) -> dict:
    """``steps`` whole trainer steps in ``workdir``, then a checkpoint: setup, per-step
    (``STEP_KEYS``) and checkpoint times; ``report`` gets the result so far after every step."""
    from davinci_kernel.rl.trainer import RLTrainer

    out: dict = {"steps": []}
    t0 = time.perf_counter()
    t = RLTrainer(cfg, out=workdir)
    out["setup_s"] = time.perf_counter() - t0
    for s in range(1, steps + 1):
        m = t.step(s)
        out["steps"].append({k: m.get(k) for k in STEP_KEYS})
        report(out)
    t0 = time.perf_counter()
    t.save(steps)
    out["checkpoint_s"] = time.perf_counter() - t0
    del t
    _free()
    return out


def bench_full(path, args, report=lambda part: None) -> dict:
    """Whole trainer steps; ``report`` gets the result so far after every step."""
    from davinci_kernel.config import load_config

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(ROOT / "configs" / "tiny-cpu.yaml", [
            f"rl.model=hf:{path}", f"rl.env={args.env}", f"rl.steps={args.full_steps}", "rl.eval_every=0",
            "rl.bf16=true", f"rl.grad_checkpointing={str(not args.no_grad_ckpt).lower()}",
            f"rl.micro_batch_tokens={args.micro_batch_tokens}", "rl.lr=1e-6",
            f"rollout.max_new_tokens={args.full_new_tokens}", "rl.batch_tasks=4", "rollout.k_schemes=3",
            "rollout.n_rollouts=4", "rollout.turns=2"])
        return {"env": args.env, **trainer_steps(cfg, tmp, args.full_steps,
                                                 lambda part: report({"env": args.env, **part}))}


def _profile(step, name: str, args) -> None:
    """One more ``step()`` under torch.profiler: the top ops by device time, then by host
    time, go to ``--profile DIR/NAME.txt`` (where the time of each side goes)."""
    if not args.profile:
        return
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        step()
        _sync()
    key = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    d = Path(args.profile)
    d.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() else "_" for c in name)
    ka = prof.key_averages()
    (d / f"{safe}.txt").write_text(
        "by device time\n" + ka.table(sort_by=key, row_limit=40, max_name_column_width=60)
        + "\n\nby host time\n" + ka.table(sort_by="self_cpu_time_total", row_limit=40, max_name_column_width=60))


def _free():
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _summary(name, times, tokens, peak) -> dict:
    med = sorted(times)[len(times) // 2]
    return {"name": name, "step_s_median": med, "step_s_all": times, "tokens_per_step": tokens,
            "tokens_per_s": tokens / med, "peak_mem_gib": peak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="tiny model and batch (CPU smoke)")
    ap.add_argument("--batch", type=int, default=64, help="sequences per update")
    ap.add_argument("--prompt-len", type=int, default=1024)
    ap.add_argument("--completion-len", type=int, default=1024)
    ap.add_argument("--micro-batch-tokens", type=int, default=16384)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--no-grad-ckpt", action="store_true")
    ap.add_argument("--no-trl", action="store_true")
    ap.add_argument("--layouts", default="padded:fused,padded:chunked",
                    help="variants to time, LAYOUT[:LOGPROBS] each (padded | packed, chunked | fused), "
                         "e.g. padded:fused,padded:chunked (no LOGPROBS: fused); the first is 'ours'")
    ap.add_argument("--small", action="store_true", help="a CPU-sized model with long sequences (layout effects)")
    ap.add_argument("--full-steps", type=int, default=2, help="whole trainer steps (0 = skip)")
    ap.add_argument("--full-new-tokens", type=int, default=256)
    ap.add_argument("--env", default="synthetic", choices=("synthetic", "rollout"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "rl_step.json"))
    ap.add_argument("--profile", default="", metavar="DIR",
                    help="also profile one step of each side; op tables by device time go to DIR")
    args = ap.parse_args()
    if args.tiny:
        args.batch, args.prompt_len, args.completion_len = 8, 48, 16
        args.micro_batch_tokens, args.steps, args.full_new_tokens = 256, 2, 8
    args.layouts = [x for x in args.layouts.split(",") if x]
    bad = [x for x in args.layouts if x.partition(":")[0] not in ("padded", "packed")
           or x.partition(":")[2] not in ("", "chunked", "fused")]
    if bad or not args.layouts:
        print(f"rl_step.py: bad --layouts entry {', '.join(bad) or '(none)'}: LAYOUT[:LOGPROBS] with LAYOUT padded or "
              "packed and LOGPROBS chunked or fused", file=sys.stderr)
        sys.exit(2)
    if args.small:
        args.batch, args.prompt_len, args.completion_len = 16, 256, 256
        args.micro_batch_tokens, args.steps, args.full_new_tokens = 4096, 2, 8
    shape = TINY if args.tiny else (SMALL if args.small else QWEN3_05B)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        args.no_trl, args.full_steps = True, 0  # the side-by-side and trainer steps run on one GPU
    rank = int(os.environ.get("RANK", "0"))
    with tempfile.TemporaryDirectory() as tmp:
        path = build_model_dir(Path(tmp) / "model", shape)
        n_params = sum(v.numel() for v in __import__("safetensors.torch", fromlist=["load_file"]).load_file(
            str(path / "model.safetensors")).values())
        samples = make_batch(args.batch, args.prompt_len, args.completion_len, shape["vocab_size"])
        result = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available()
                  else f"CPU, {os.cpu_count()} cores ({platform.machine()})",
                  "torch": torch.__version__, "params": n_params, "shape": shape,
                  "batch": {"sequences": args.batch, "prompt_len": args.prompt_len,
                            "completion_len": args.completion_len, "micro_batch_tokens": args.micro_batch_tokens},
                  "world_size": world, "date": time.strftime("%Y-%m-%d")}
        out = Path(args.out)

        def save() -> None:  # after every part: a run cut short keeps what it measured
            if rank == 0:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(result, indent=2))

        result["ours"] = bench_ours(path, samples, args, args.layouts[0])
        save()
        for extra in args.layouts[1:]:
            result[f"ours_{extra}"] = bench_ours(path, samples, args, extra)
            save()
        result["trl"] = {"skipped": "--no-trl"} if args.no_trl else bench_trl(path, samples, args)
        save()
        if "tokens_per_s" in result["trl"]:
            # ours again after TRL: a drift in clocks or host load over the run shows up as a
            # gap between the two, and the ratio uses the median over both
            result["ours_after_trl"] = bench_ours(path, samples, args, args.layouts[0])
            both = result["ours"]["step_s_all"] + result["ours_after_trl"]["step_s_all"]
            med = sorted(both)[len(both) // 2]
            result["speedup_vs_trl"] = result["ours"]["tokens_per_step"] / med / result["trl"]["tokens_per_s"]
            save()
        if args.full_steps > 0:
            def part(done: dict) -> None:
                result["full_steps"] = done
                save()

            part(bench_full(path, args, part))
    if rank != 0:
        return
    print(f"{'update':<28}{'step s':>10}{'tokens/s':>14}{'peak GiB':>10}")
    for key in ("ours", *(f"ours_{x}" for x in args.layouts[1:]), "trl", "ours_after_trl"):
        r = result.get(key, {"skipped": "(not run)"})
        if "tokens_per_s" in r:
            print(f"{r['name']:<28}{r['step_s_median']:>10.3f}{r['tokens_per_s']:>14.0f}"
                  f"{(r['peak_mem_gib'] or 0):>10.1f}")
        else:
            print(f"{key:<28}{r.get('skipped') or r.get('error')}")
    if "speedup_vs_trl" in result:
        print(f"ours / trl tokens/s: {result['speedup_vs_trl']:.2f}x (ours: median step over both of its runs)")
    for s in result.get("full_steps", {}).get("steps", []):
        print(f"full step: {s['step_s']:.2f}s (generation {s['gen_s']:.2f}s, update {s['update_s']:.2f}s)")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
