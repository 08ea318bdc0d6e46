"""The co-evolution experiment (``bench/coevolution.py``): skills admitted by execution during
RL on our own kernel variants, then selected and used, against arms without them.

Modules: ``protocol`` (what is committed before any GPU run, and each arm's config),
``sftdata`` (the SFT data: evaluation tasks and practice tasks), ``book`` (the run's
verdicts: reused for policy turns, never for verification), ``metrics`` (one row per step),
``runner`` (one arm x seed, resumable), ``report`` (the JSON, plot, table and the success
criteria).
"""
