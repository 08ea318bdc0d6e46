"""When one evaluation is not the last word: every retry rule of the harness, in one place.

Covers, in the harness process:
- **out of memory beside others**: an evaluation that ran out of device or host memory
  while other evaluations held memory beside it is judged again with the device alone
  (memory no plan counts: a model's intermediates, library workspaces, a process still
  tearing down), so an out-of-memory verdict is the task's or the candidate's own;
- **re-timing**: a correct candidate whose only flags are timing disagreements
  (``RETIMED``) is evaluated once more in a fresh sandbox on newly drawn inputs, its
  reference timed afresh too; the flags stand unless that evaluation is clean (host
  hiccups outside a worker's reach then do not fail an honest kernel; time hidden, or a
  reference slowed, on purpose shows again);
- **re-verification**: a speedup above ``eval.implausible_speedup`` must reproduce within
  25 % in a fresh sandbox on newly drawn inputs, else ``unreproducible_speedup``.
Each second evaluation draws its own inputs (``draws.py``), never those of the first.
Does not cover: judging (``judge.py``) or running one evaluation (``evaluator.py``).
"""

from __future__ import annotations

import math
import re
import time

from ...records import EvalResult
from . import judge
from .isolation.procs import HOST_OOM_NOTE

RETIMED = {"timing_mismatch", "reference_slowed"}  # two timings disagree: measured once more before they stand
_DEVICE_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError")


def out_of_memory(res: EvalResult) -> bool:
    """The evaluation failed for want of memory, as the harness knows it: the admission's
    ``too_large``, or an OOM kill the worker's cgroup recorded. On a GPU also torch's
    out-of-memory error, which only the worker's message carries (no process outside it
    sees device allocations): a candidate that raises it on purpose buys one more run of
    itself, alone on the device, within its own deadlines, and nothing else. A candidate's
    own ``MemoryError`` on the CPU is its own failure."""
    if not res.error_kind:
        return False
    msg = res.error_msg or ""
    return res.error_kind == "too_large" or HOST_OOM_NOTE in msg or (
        res.device != "cpu" and bool(_DEVICE_OOM.search(msg)))


def alone_if_out_of_memory(first: EvalResult, shared: bool, again) -> EvalResult:
    """``first``, or (it ran out of memory while others could hold memory) ``again()``, the
    evaluation with the device alone, with a warning saying why."""
    if not (shared and out_of_memory(first)):
        return first
    why = (first.error_msg or "").splitlines()[0][:200] if first.error_msg else first.error_kind
    res = again()
    res.warnings.append(f"out_of_memory_beside_others: {why}; judged again alone on the device")
    return res


def second_opinions(res: EvalResult, again, implausible: float, remeasure) -> None:
    """Apply the re-timing and re-verification rules to a finished ``res``; ``again(salt)``
    is a fresh evaluation of the same candidate on inputs drawn with that salt;
    ``remeasure()`` has the reference process time the reference afresh (before a re-timing)."""
    if res.flags and set(res.flags) <= RETIMED and res.timing_available:
        t1 = time.monotonic()
        remeasure()
        _retime(res, again(1))
        res.phase_seconds["retime"] = round(time.monotonic() - t1, 4)
    if res.speedup is not None and not res.flags and res.speedup > implausible:
        t1 = time.monotonic()
        _reverify(res, again(2))
        res.phase_seconds["reverify"] = round(time.monotonic() - t1, 4)


def _clean(r: EvalResult) -> bool:
    return r.trials_passed == r.trials > 0 and not r.error_kind and not r.flags


def _retime(res: EvalResult, again: EvalResult) -> None:
    first = res.error_msg or ", ".join(res.flags)
    if not (_clean(again) and again.timing_available):
        got = again.error_kind or ",".join(again.flags) or "no timing"
        res.error_msg = f"{first} (again in a fresh sandbox with new inputs: {got})"
        return
    for name in ("runtime_ms", "ref_runtime_ms", "runtime_spread", "speedup", "speedup_ci", "peak_fraction",
                 "speedup_compile",
                 "compile_runtime_ms", "coverage", "custom_launches", "kernels", "timing_detail"):
        setattr(res, name, getattr(again, name))
    res.flags, res.error_msg = [], None
    res.warnings.append(f"{first}; it did not recur in a fresh sandbox with new inputs, whose timing this is")


def _reverify(res: EvalResult, again: EvalResult) -> None:
    if _clean(again) and again.speedup is not None and abs(math.log(again.speedup / res.speedup)) <= math.log(1.25):
        res.warnings.append(f"implausible_speedup: {res.speedup:.1f}x re-verified in a fresh sandbox with new "
                            f"inputs ({again.speedup:.1f}x)")
        return
    got = f"{again.speedup:.2f}x" if again.speedup else (again.error_kind or ",".join(again.flags) or "failed")
    judge.flag(res, [("unreproducible_speedup", f"{res.speedup:.1f}x did not reproduce in a fresh sandbox "
                      f"with new inputs ({got})")])
