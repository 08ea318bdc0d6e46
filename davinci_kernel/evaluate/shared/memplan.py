"""How much of a task's data a worker may hold at once: the memory plan.

Covers: pure arithmetic from the bytes of one input set (``I``), of one call's outputs
(``O``), the memory available to the worker and the L2 flush buffer: how many input sets
the timing phase rotates over, whether its placement blocks may allocate fresh copies
while the old ones live, and the peak that plan reaches. Correctness needs no choice: trials
run one at a time (an input set, its clone and the output: ``2I + O``), each set freed after
its comparison. The bound the harness keeps per task:

    peak ≈ max(2I + O, timing) + flush + context, timing = n·I·(2 if fresh placements else 1)
                                                         + I (fresh-value copy) + (n + 2)·O

which with one set is 2I + 3O. The plan never exceeds 4 × (I + O) + 1 GiB (the fixed
part lets small tasks keep all their sets) whatever the free memory: a large task times on
two sets, not on as many as the GPU could hold. The model's own parameters and buffers
(``P``, one copy per model) come on top: ``bound`` = 4 × (I + O) + 3P + fixed, the three
copies being the problem's Model and the candidate in the worker, and the candidate built
again at the perturbed size (one at a time). Does not cover: measuring (the worker reads ``torch.cuda.mem_get_info``
and its inputs' sizes) or admission across workers of one GPU (``gate.py``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import NamedTuple

GiB = 1 << 30
SMALL_TASK_BYTES = 1 << 30  # below this, a task's sets are never cut by the 4 x (I + O) bound
MODEL_COPIES = 3  # a worker's models at once: the problem's Model, the candidate, the candidate at another size


class Sizes(NamedTuple):
    """What a task's memory is planned by: one call's inputs and outputs, and the model's
    parameters and buffers (one copy), in bytes."""
    input_bytes: int
    output_bytes: int
    param_bytes: int


@dataclass
class Plan:
    sets: int  # input sets the timed pairs rotate over (>= 1)
    placements: int  # timed blocks; > 1 only where fresh copies fit beside the old ones
    peak_bytes: int  # the plan's own estimate of its peak (inputs, clones, outputs, flush)
    budget_bytes: int  # what it had to fit in
    fits: bool  # False: even one set does not fit; the task is too large for this device

    def as_dict(self) -> dict:
        return asdict(self)


def check_peak(input_bytes: int, output_bytes: int) -> int:
    """Correctness, one trial at a time: an input set, its clone and the output."""
    return 2 * input_bytes + output_bytes


def timing_peak(input_bytes: int, output_bytes: int, sets: int, placements: int) -> int:
    """Timing: ``sets`` input sets (twice while a placement block's copies are made), one
    fresh-value copy of a set, the kept last output of each set and two in flight."""
    copies = 2 if placements > 1 else 1
    return sets * input_bytes * copies + input_bytes + (sets + 2) * output_bytes


def bound(input_bytes: int, output_bytes: int, fixed: int = SMALL_TASK_BYTES, param_bytes: int = 0) -> int:
    """The most a task may take on the device, flush buffer and context aside: its data,
    and three copies of its model's parameters and buffers (``param_bytes`` each); ``fixed``:
    the allowance that lets small tasks keep all their sets on a GPU (a CPU evaluation holds
    no sets and needs less)."""
    return 4 * (input_bytes + output_bytes) + MODEL_COPIES * param_bytes + fixed


def plan_timing(input_bytes: int, output_bytes: int, budget_bytes: int, flush_bytes: int, max_sets: int,
                placements: int) -> Plan:
    """The most input sets (up to ``max_sets``) that fit ``budget_bytes`` beside the flush
    buffer, with fresh placement copies where they fit as many sets as without; at least one
    set whatever the budget (KernelBench times on one), ``fits`` False when not even that fits.
    Never plans past ``bound`` however much is free."""
    room = min(budget_bytes - flush_bytes, bound(input_bytes, output_bytes))

    def most_sets(p: int) -> int:
        return next((n for n in range(max(1, max_sets), 0, -1)
                     if timing_peak(input_bytes, output_bytes, n, p) <= room), 0)

    with_copies = most_sets(placements) if placements > 1 else 0
    without = most_sets(1)
    # more input sets first; at a tie, fresh placements
    sets, p = (with_copies, placements) if with_copies and with_copies >= without else (max(1, without), 1)
    peak = timing_peak(input_bytes, output_bytes, sets, p) + flush_bytes
    return Plan(sets, p, peak, budget_bytes, peak <= budget_bytes)


def least_need(input_bytes: int, output_bytes: int, param_bytes: int = 0) -> int:
    """What a worker needs at the least: its models and one correctness trial."""
    return MODEL_COPIES * param_bytes + check_peak(input_bytes, output_bytes)



def model_bytes(torch, model) -> int:
    """Bytes of a module's parameters and buffers (meta or fake tensors count too)."""
    if not isinstance(model, torch.nn.Module):
        return 0
    return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))


def tensor_bytes(torch, xs) -> int:
    """Bytes of the tensors in a (nested) list/tuple/dict, or of one tensor."""
    if isinstance(xs, torch.Tensor):
        return xs.numel() * xs.element_size()
    if isinstance(xs, (list, tuple)):
        return sum(tensor_bytes(torch, x) for x in xs)
    if isinstance(xs, dict):
        return sum(tensor_bytes(torch, x) for x in xs.values())
    return 0
