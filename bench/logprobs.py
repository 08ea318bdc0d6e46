"""Token log-probs over a large vocabulary: plain autograd vs the chunked Function (GPU).

The RL update needs log softmax(logits)[target] for every generated token of a micro-batch:
(K, V) logits with K up to 16k tokens and V = 152k. The plain formula keeps float32 copies of
the whole (K, V) block for autograd; ``rl.losses.token_logprobs`` works row chunk by row
chunk with a hand-written backward. This times forward + backward of both, side by side in
one run, for several chunk sizes, and prints milliseconds and peak memory.

    python bench/logprobs.py [--tokens 8192] [--vocab 151936] [--out bench/results/logprobs_h200.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import davinci_kernel.rl.losses as losses  # noqa: E402


def plain(logits, targets, temperature):
    x = logits.float() / temperature
    return x.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(x, dim=-1)


def chunked(logits, targets, temperature):
    return losses.token_logprobs(logits, targets, temperature)


def time_one(fn, logits, targets, g, reps: int) -> tuple[float, float]:
    """Median ms of forward + backward, and peak GiB above the inputs."""
    times = []
    for i in range(reps + 2):
        x = logits.detach().requires_grad_(True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        (fn(x, targets, 0.9) * g).sum().backward()
        e.record()
        torch.cuda.synchronize()
        if i >= 2:
            times.append(s.elapsed_time(e))
        peak = (torch.cuda.max_memory_allocated() - base) / 2**30
        del x
    times.sort()
    return times[len(times) // 2], peak


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "logprobs.json"))
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    logits = (torch.randn(a.tokens, a.vocab, device="cuda") * 2).to(torch.bfloat16)
    targets = torch.randint(0, a.vocab, (a.tokens,), device="cuda")
    g = torch.randn(a.tokens, device="cuda")
    ref = plain(logits, targets, 0.9)
    rows = []
    ms, peak = time_one(plain, logits, targets, g, a.reps)
    rows.append({"name": "plain autograd", "ms": ms, "peak_gib": peak})
    default = losses.CHUNK_ELEMENTS
    for chunk in (1 << 26, 1 << 27, 1 << 28, 1 << 29, 1 << 30):
        losses.CHUNK_ELEMENTS = chunk
        err = float((chunked(logits, targets, 0.9) - ref).abs().max())
        ms, peak = time_one(chunked, logits, targets, g, a.reps)
        rows.append({"name": f"chunked {chunk // a.vocab} rows", "chunk_elements": chunk, "ms": ms,
                     "peak_gib": peak, "max_abs_err": err, "default": chunk == default})
    losses.CHUNK_ELEMENTS = default
    print(f"{'token log-probs fwd+bwd':28s} {'ms':>8s} {'peak GiB':>9s}   ({a.tokens} x {a.vocab} bf16)")
    for r in rows:
        print(f"{r['name'] + (' *' if r.get('default') else ''):28s} {r['ms']:8.2f} {r['peak_gib']:9.2f}")
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "date": dt.date.today().isoformat(),
           "tokens": a.tokens, "vocab": a.vocab, "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=2))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
