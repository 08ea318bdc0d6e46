"""The judged inputs of an evaluation, drawn by the harness and kept secret until used.

Covers, in the harness process: the trial seeds (each trial's inputs are made from its
seed), the order in which the perturbed sizes are tried (so the size judged is a random
one among the valid variants, not a function of the problem file), the seed of the
perturbed-size inputs, and the timed checks (which timed rounds have their outputs
compared, as positions drawn in [0, 1), and the seed of each one's input variation), and
the call seeds: a fresh secret seed per compared call (each trial, the perturbed size, each
timed check) from which that call's random stream starts, on both sides (a stochastic
reference, dropout in training mode, is compared on the same stream). A call seed is drawn
on its own, never computed from the inputs' seed, so ``torch.initial_seed()`` in a
candidate's call reveals neither its inputs nor whether it is compared: its uncompared
timed calls start from fresh secret seeds of the worker's, drawn alike.
They are drawn from the operating system's randomness, once per evaluator and task
(every candidate of an RL group is then judged on the same inputs, and the references
for them are computed once), or afresh for a second opinion (a re-timing, a
re-verification). ``eval.input_seed`` draws them from a seed instead, to reproduce a
verdict; every result records what was drawn (``EvalResult.judged_inputs``).

How they stay secret: a candidate worker is never sent them in its job. It asks for a
trial's seed when that trial starts, for the perturbed size when that call starts, and is
told the timed checks when its timed phase starts; the candidate's Python cannot read
the worker's own variables (the code policy allows no reflection), so nothing is known
at import time, when the candidate could precompute. Does not cover: making inputs from
seeds (``runtime.gen_inputs``) or what the reference computes for them (``reference.py``).
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
from dataclasses import dataclass, field
from typing import Optional

TIMED_CHECKS = 2  # timed rounds, beside the last, whose outputs are compared
STEP_RANGE = 1 << 20  # a size's step is drawn below this: each of its ``shapes.size_choices`` about equally often


@dataclass(frozen=True)
class Draw:
    """What one evaluation is judged on."""

    trial_seeds: tuple[int, ...]
    perturb: tuple[dict, ...]  # drawn size overrides in the order the reference process tries them (first valid judged)
    odd: tuple[dict, ...]  # odd sizes, likewise tried in order (information only)
    perturb_seed: int
    timed_checks: tuple[tuple[float, int], ...] = field(default=())  # (position in [0, 1), variation seed)
    call_seeds: tuple[int, ...] = field(default=())  # per trial: the seed its call's random stream starts from
    perturb_call_seed: int = 0  # the perturbed (and odd) size's call
    check_call_seeds: tuple[int, ...] = field(default=())  # per timed check: its call's seed

    def call_seed(self, i: int) -> int:
        """Trial ``i``'s call seed (0 where none was drawn)."""
        return self.call_seeds[i] if i < len(self.call_seeds) else 0

    def key(self) -> str:
        """The draw as one hashable string (what a reference entry is cached by)."""
        return json.dumps([self.trial_seeds, self.perturb, self.odd, self.perturb_seed, self.timed_checks,
                           self.call_seeds, self.perturb_call_seed, self.check_call_seeds], sort_keys=True)

    def record(self, perturb_used: Optional[dict]) -> dict:
        """What a result keeps so that its verdict can be reproduced."""
        return {"trial_seeds": list(self.trial_seeds), "perturb_seed": self.perturb_seed,
                "perturbed_sizes": perturb_used, "timed_checks": [list(c) for c in self.timed_checks],
                "call_seeds": list(self.call_seeds), "perturb_call_seed": self.perturb_call_seed,
                "check_call_seeds": list(self.check_call_seeds)}


def draw(task_hash: str, trials: int, variant: Optional[str], odd: list[dict], input_seed: Optional[int] = None,
         salt: int = 0) -> Draw:
    """A fresh draw: from the OS, or (``input_seed``) from that seed, the task and ``salt``.
    ``variant``: the problem text whose sizes are perturbed (None: no shape re-check);
    each size's step away from the task's (``shapes.keep_pow2``) is drawn, so the judged
    size is one of many (``shapes.size_choices``). ``odd``: the odd sizes (information only, not drawn)."""
    from ...tasks.shapes import perturbations, perturbed_names

    if input_seed is None:
        rng: random.Random = secrets.SystemRandom()
    else:
        digest = hashlib.sha256(f"{input_seed}:{task_hash}:{salt}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))

    def seed() -> int:
        return rng.getrandbits(62)

    seeds: list[int] = []
    while len(seeds) < trials:  # distinct seeds: every trial its own inputs
        s = seed()
        if s not in seeds:
            seeds.append(s)
    p = []
    if variant is not None:
        p = perturbations(variant, steps={n: rng.randrange(1, STEP_RANGE) for n in perturbed_names(variant)})
    checks = tuple((rng.random(), seed()) for _ in range(TIMED_CHECKS))
    perturb_seed = seed()
    # call seeds: drawn on their own (nothing computes them from an input seed), one per compared call
    calls = tuple(seed() for _ in range(trials))
    return Draw(tuple(seeds), tuple(p), tuple(odd), perturb_seed, checks, calls, seed(),
                tuple(seed() for _ in range(TIMED_CHECKS)))
