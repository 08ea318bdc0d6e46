"""Token log-probs over a large vocabulary, forward + backward, side by side in one run (GPU).

The RL update needs log softmax(logits / T)[target] for every generated token of a
micro-batch: K up to 16k tokens, V = 152k. Two shapes of the problem are timed:

- from logits (K, V) bf16: plain autograd (float32 copies of the whole block), then
  ``rl.losses.token_logprobs`` with its softmax math in torch (row chunks, several float32
  passes) and in the Triton kernels of ``rl.logprob_kernels`` (one pass each way);
- from the output head, hidden (K, H) and weight (V, H) float32 under bf16 autocast, with no
  logits tensor: ``rl.losses.linear_logprobs`` with torch and with Triton softmax math, and,
  when ``trl`` is importable, TRL's own chunked log-prob function on the same tensors.

Prints milliseconds and peak memory above the inputs; writes JSON.

    python bench/logprobs.py [--tokens 8192] [--vocab 151936] [--hidden 1024] [--out FILE]
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

import davinci_kernel.rl.logprob_kernels as kernels  # noqa: E402
import davinci_kernel.rl.losses as losses  # noqa: E402

T = 0.9


def plain(logits, targets):
    x = logits.float() / T
    return x.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(x, dim=-1)


def time_one(fn, inputs, g, reps: int) -> tuple[float, float, torch.Tensor, list]:
    """Median ms of forward + backward under bf16 autocast, peak GiB above the inputs, the
    last output and gradients."""
    times = []
    for i in range(reps + 2):
        xs = [x.detach().requires_grad_(x.is_floating_point()) for x in inputs]
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = fn(*xs)
        (out * g).sum().backward()
        e.record()
        torch.cuda.synchronize()
        if i >= 2:
            times.append(s.elapsed_time(e))
        peak = (torch.cuda.max_memory_allocated() - base) / 2**30
    times.sort()
    return times[len(times) // 2], peak, out.detach(), [x.grad for x in xs if x.grad is not None]


def trl_head():
    """TRL's chunked log-prob function as fn(hidden, weight, targets), or None."""
    try:
        import trl
        from trl.kernels import ChunkedLogProbFunction
    except ImportError:
        return None, None

    def fn(h, w, t):
        out = ChunkedLogProbFunction.apply(h, w, None, t, T, 32768, None, 1.0, ("log_probs",))
        return out[0] if isinstance(out, tuple) else out

    return fn, trl.__version__


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "logprobs.json"))
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    k, v, hd = a.tokens, a.vocab, a.hidden
    logits = (torch.randn(k, v, device="cuda") * 2).to(torch.bfloat16)
    targets = torch.randint(0, v, (k,), device="cuda")
    g = torch.randn(k, device="cuda")
    rows = []

    def run(name, part, fn, inputs, ref=None, ref_grads=None, **extra):
        ms, peak, out, grads = time_one(fn, inputs, g, a.reps)
        row = {"name": name, "part": part, "ms": ms, "peak_gib": peak, **extra}
        if ref is not None:
            row["max_abs_err"] = float((out.float() - ref).abs().max())
            row["grad_rel_err"] = [float((x.float() - y.float()).norm() / y.float().norm())
                                   for x, y in zip(grads, ref_grads)]
        rows.append(row)
        return out, grads

    ref, ref_g = run("plain autograd", "logits", plain, [logits, targets])
    for use in (False, True):
        kernels.ENABLED = use
        run(f"ours chunked, {'triton' if use else 'torch'} softmax", "logits",
            lambda x, t: losses.token_logprobs(x, t, T), [logits, targets], ref, ref_g)
    del logits
    hidden = torch.randn(k, hd, device="cuda")
    weight = torch.randn(v, hd, device="cuda") * hd ** -0.5
    href, href_g = run("plain autograd", "head", lambda h, w, t: plain(h @ w.t(), t), [hidden, weight, targets])
    for use in (False, True):
        kernels.ENABLED = use
        run(f"ours fused, {'triton' if use else 'torch'} softmax", "head",
            lambda h, w, t: losses.linear_logprobs(h, w, None, t, T), [hidden, weight, targets], href, href_g)
    kernels.ENABLED = True
    fn, version = trl_head()
    if fn is not None:
        try:
            run(f"trl {version} ChunkedLogProbFunction", "head", fn, [hidden, weight, targets], href, href_g)
        except Exception as e:  # an API drift in TRL is a result to report
            rows.append({"name": "trl", "part": "head", "error": f"{type(e).__name__}: {e}"[:300]})
    print(f"{'token log-probs fwd+bwd':40s} {'ms':>8s} {'peak GiB':>9s}   (K={k}, V={v}, H={hd}, bf16)")
    for r in rows:
        print(f"{r['part'] + ': ' + r['name']:40s} " + (f"{r['ms']:8.2f} {r['peak_gib']:9.2f}" if "ms" in r
                                                        else r["error"]))
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "date": dt.date.today().isoformat(),
           "tokens": k, "vocab": v, "hidden": hd, "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=2))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
