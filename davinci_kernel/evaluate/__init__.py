"""③ Evaluate: a KernelBench-compatible harness that treats every candidate as adversarial.

What it covers
--------------
* The candidate runs only in worker processes (``pool.py``/``worker.py``); this process
  parses it (``static.py``), judges raw output bytes (``correctness.py``) and applies the
  flag rules (``guards.py``). It never imports candidate code.
* Correctness: ≥5 trials with fresh inputs from distinct seeds, separate clones for
  reference and candidate, the same init seed for both models, shape/dtype/allclose
  (atol = rtol = 1e-2 by default), NaN/Inf never pass; a refill of the same buffers
  (result caching), a second run under a different allocator poison (uninitialized
  memory), and a run at perturbed sizes (hard-coded shapes).
* Timing (GPU): reference and candidate interleaved call by call, L2 flush, device events
  cross-checked against device-synchronized wall time; eager and torch.compile baselines
  cached per (task hash, size variant, GPU, torch version). Several workers may share a
  GPU: they check side by side, but a per-GPU gate held here (``gate.py``) lets only one
  of them time at a time.
* Integrity: identity snapshot of torch, timers, builtins, numpy, triton and the harness's
  own modules before the candidate is imported, compared after each phase; reference
  outputs are computed before the candidate is imported and poisoned before being freed.
* Isolation: a timeout, crash or CUDA error kills the worker and starts a replacement;
  so does any flagged candidate.
* CPU mode: Triton runs under the interpreter at the task's small shapes; timing is
  reported unavailable, coverage is estimated from work counts.

What it does not cover
----------------------
No OS-level sandbox: network, files, ctypes and raw memory writes are not blocked. A
candidate that corrupts the worker's interpreter through ctypes could forge that
worker's reports; run untrusted code on machines you can throw away.
"""

from .evaluator import Evaluator, evaluate
from .guards import FLAGS, SOFT

__all__ = ["Evaluator", "evaluate", "FLAGS", "SOFT"]
