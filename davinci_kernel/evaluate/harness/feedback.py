"""The feedback text the policy reads after each turn.

Covers: one short, factual message per EvalResult: what stage failed and why (compile
errors trimmed to their useful lines), max abs/rel difference, flags with their meaning,
speedups vs eager and vs torch.compile, coverage and the top kernels by time.
Does not cover: the chat framing around it (agents/).
"""

from __future__ import annotations

from ...records import EvalResult
from .guards import FLAGS, SOFT


def build(r: EvalResult) -> str:
    lines: list[str] = []
    if r.error_kind and r.stage in ("static", "compile", "load", "reference"):
        lines.append(f"Status: failed at {r.stage} ({r.error_kind}).")
        if r.error_msg:
            lines.append(_trim(r.error_msg, 25))
    elif r.error_kind and not r.flags:
        lines.append(f"Status: {'compiled, ' if r.compiled else ''}incorrect ({r.error_kind}) "
                     f"after {r.trials_passed}/{r.trials} correct trials.")
        if r.error_msg:
            lines.append(_trim(r.error_msg, 15))
    elif r.flags:
        lines.append("Status: rejected by the harness's integrity checks.")
    else:
        lines.append(f"Status: correct on {r.trials}/{r.trials} trials" + (" and at perturbed sizes." if "perturbation_skipped" not in r.warnings else "."))
    if r.max_abs_diff is not None and (r.error_kind in ("wrong_output", None)):
        lines.append(f"Max abs diff {r.max_abs_diff:.3g}, max rel diff {r.max_rel_diff:.3g}.")
    for f in r.flags:
        lines.append(f"- {f}: {FLAGS.get(f, '')}")
    if r.runtime_ms is not None:
        s = f"Runtime {r.runtime_ms:.4f} ms vs eager {r.ref_runtime_ms:.4f} ms: speedup {r.speedup:.2f}x"
        if r.speedup_ci:
            s += f" (95% interval {r.speedup_ci[0]:.2f}-{r.speedup_ci[1]:.2f}x)"
        if r.peak_fraction is not None:
            s += f", {r.peak_fraction:.0%} of the card's peak"
        if r.speedup_compile is not None:
            s += f", {r.speedup_compile:.2f}x vs torch.compile"
        lines.append(s + ".")
    elif r.correct and not r.timing_available:
        lines.append("Timing unavailable on this device (correctness only).")
    if r.coverage is not None:
        lines.append(f"Coverage of custom kernels (their share of the work run, and of kernel time on a GPU): "
                     f"{r.coverage:.0%}.")
    if r.kernels:
        lines.append("Top kernels: " + "; ".join(
            f"{k.name[:60]} {k.time_ms:.3f} ms{'' if k.custom else ' (library)'}" for k in r.kernels[:5]))
    for w in r.warnings:
        name = w.split(":", 1)[0]
        if name in SOFT:
            lines.append(f"Note: {w}")
    return "\n".join(lines)


def _trim(text: str, max_lines: int) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) <= max_lines:
        return "\n".join(lines)
    return "\n".join(lines[: max_lines // 3] + ["..."] + lines[-(max_lines - max_lines // 3 - 1):])
