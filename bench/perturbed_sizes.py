"""How many perturbed sizes each built-in task can be judged at, and how likely the likeliest one is.

For every built-in task, at its GPU sizes and at its CPU sizes (``CPU_SHAPES``): the sizes
the shape re-check changes, how many distinct sizes its first variant (all larger) and its
last (all smaller) can draw (``tasks.shapes.size_choices``), and, from ``--draws`` draws
made as the harness makes them (``harness.draws.draw``), the share of draws that judged
the likeliest size: a kernel written for the task's size and that one predicted size
passes the re-check that often. Which variant is judged is the reference process's rule:
the first whose inputs, outputs and parameters stay within 1.25x the task's (or 64 MiB),
sized on the meta device as the reference process sizes them. Prints a Markdown table
(docs/guarantees.md has one). Runs on the CPU, allocates nothing.

    python bench/perturbed_sizes.py [--draws 300]
"""

from __future__ import annotations

import argparse
import collections
import math

from davinci_kernel.evaluate.harness import draws
from davinci_kernel.evaluate.reference.process import _within, meta_sizes
from davinci_kernel.evaluate.shared import runtime as rt
from davinci_kernel.tasks import load_suite
from davinci_kernel.tasks.shapes import apply_overrides, cpu_overrides, int_constants, perturbed_names, size_choices


def _judged(source: str, variants: list[dict], base, cache: dict):
    """The first variant the reference process would keep (by size alone), or None."""
    for v in variants:
        key = tuple(sorted(v.items()))
        if key not in cache:
            cache[key] = meta_sizes(rt.exec_source(apply_overrides(source, v), "dvk_bench_perturb"), 0)
        s = cache[key]
        if base is None or s is None or (_within(s.input_bytes + s.output_bytes, base.input_bytes + base.output_bytes)
                                         and _within(s.param_bytes, base.param_bytes)):
            return key
    return None


def row(name: str, source: str, n_draws: int) -> str:
    names = perturbed_names(source)
    consts = int_constants(source)
    up = math.prod(len(size_choices(consts[n], True)) for n in names)
    down = math.prod(len(size_choices(consts[n], False)) for n in names)
    base = meta_sizes(rt.exec_source(source, "dvk_bench_task"), 0)
    seen: collections.Counter = collections.Counter()
    cache: dict = {}
    for _ in range(n_draws):
        d = draws.draw("bench", 1, source, [])
        seen[_judged(source, list(d.perturb), base, cache)] += 1
    top, hits = seen.most_common(1)[0] if seen else (None, 0)
    sizes = ", ".join(f"{n}={consts[n]}" for n in names)
    return f"| {name} | {sizes} | {up:,} | {down:,} | {len(seen)} | {hits / max(1, n_draws):.1%} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=300, help="draws per task and device size")
    args = ap.parse_args()
    rt.C = rt.Captured(__import__("torch"))
    print("| task | sizes changed | all larger | all smaller | judged in the draws | likeliest size judged |")
    print("|---|---|---|---|---|---|")
    for t in load_suite("builtin"):
        for label, src in (("GPU", t.source), ("CPU", apply_overrides(t.source, cpu_overrides(t.source)))):
            print(row(f"{t.name} ({label})", src, args.draws), flush=True)


if __name__ == "__main__":
    main()
