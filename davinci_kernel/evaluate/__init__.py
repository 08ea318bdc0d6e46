"""③ Evaluate: a KernelBench-compatible harness that treats every candidate as adversarial.

What it covers
--------------
* Three kinds of process. This one (the harness: ``evaluator.py``) parses candidates
  (``static.py``), reads their outputs as raw bytes (``intake.py``), compares them
  (``correctness.py``), applies the flag rules (``judge.py``, ``guards.py``) and alone
  writes anything stored; it never imports candidate code and is non-dumpable. Reference
  processes (``reference.py``) run only the problem's own Model: reference outputs, the
  perturbed sizes, clean baselines. Candidate workers (``candidate.py``) run one candidate
  each, inside the OS sandbox of ``sandbox.py`` (own uid, PID/network/mount namespaces,
  scratch-only writes, rlimits, cgroup), and are then killed (``procs.py``, ``pool.py``).
  Messages are typed JSON (``protocol.py``).
* Correctness: ≥5 trials with fresh inputs from distinct seeds, separate clones, the same
  init seed for both models, shape/dtype/allclose plus a relative-L2 limit per dtype,
  NaN/Inf never pass; a refill of the same buffers (result caching), a second run under a
  different allocator poison (uninitialized memory), a run at perturbed sizes (hard-coded
  shapes). Memory is planned per task (``memplan.py``) and admitted per device: evaluations
  in flight never promise more bytes than the device has (``admission.py``).
* Timing (GPU): reference and candidate interleaved call by call in the candidate's worker,
  L2 flush held on every SM (``occupy.py``), device events; the reported times are checked
  against the reference process's clean timings and the wall time the harness measures;
  eager and torch.compile baselines cached per (task hash, size variant, GPU, torch
  version). Several workers may share a GPU: a per-GPU gate (``gate.py``) lets one time.
* CPU mode: Triton runs under the interpreter at the task's small shapes; timing is
  reported unavailable, coverage is estimated from work counts.

What it does not cover
----------------------
See the trust model at the top of ``evaluator.py`` and the README: evidence of custom
kernels and timing claims come from the candidate's own process and are checked only
within limits; no seccomp filter; the GPU is shared with the worker.
"""

from .harness.guards import FLAGS, SOFT


def __getattr__(name: str):
    """``Evaluator`` and ``evaluate`` load on first use: a worker process imports this package
    too, and must enter its sandbox before torch loads (``sandbox_enter.py``)."""
    if name in ("Evaluator", "evaluate"):
        from .harness import evaluator

        return getattr(evaluator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Evaluator", "evaluate", "FLAGS", "SOFT"]
