"""③ Evaluate: a KernelBench-compatible harness that treats every candidate as adversarial.

What it covers
--------------
* Three kinds of process, one folder each, so a file's path says where it runs:
  ``harness/`` (this process: the evaluator, the draws of the judged inputs, reading and
  comparing outputs, every verdict, the pool; ``harness/codepolicy/`` the code policy;
  ``harness/isolation/`` the OS sandbox and the worker processes; it never imports
  candidate code and is non-dumpable), ``reference/process.py`` (the problem's own
  Model only: reference outputs, the float64 oracle, clean baselines) and
  ``candidate/worker.py`` (one candidate, sandboxed, then discarded); ``shared/`` holds what
  more than one imports (the JSON protocol, the worker runtime and sandbox entry, output
  transfer, timing, the flush kernel, kernel recording, the work audit, memory plans,
  precision math).
* Correctness: ≥5 trials on inputs drawn by the harness, separate clones, the same init seed
  for both models, allclose plus a relative-L2 limit, a float64 oracle for float32 outputs,
  NaN/Inf never pass; result caching, uninitialized memory and hard-coded sizes checked.
  Memory is planned per task and admitted per device.
* Timing (GPU): reference and candidate interleaved call by call, L2 flush held on every
  SM, device events bounded by the harness's wall time and the reference process's clean
  timing; timed rounds the harness picks are compared too.
* CPU mode: Triton runs under the interpreter at the task's small shapes; no timing.

What it does not cover
----------------------
docs/guarantees.md: what each guarantee still trusts, and what an adversary could still
forge on the CPU (after a code-policy escape) and on the GPU (native code).
"""

from .harness.guards import FLAGS, SOFT


def __getattr__(name: str):
    """The public names load on first use: a worker process imports this package too, and
    must enter its sandbox before torch loads (``sandbox_enter.py``)."""
    if name in ("Evaluator", "evaluate"):
        from .harness import evaluator

        return getattr(evaluator, name)
    if name == "EvalConfig":
        from ..config import EvalConfig

        return EvalConfig
    if name == "EvalResult":
        from ..records import EvalResult

        return EvalResult
    if name == "load_task_file":
        from ..tasks import load_task_file

        return load_task_file
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Evaluator", "evaluate", "EvalConfig", "EvalResult", "load_task_file", "FLAGS", "SOFT"]
