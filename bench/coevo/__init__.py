"""The co-evolution experiment (``bench/coevolution.py``, protocol version 2): a technique
learned on an RL task, admitted by execution during RL, then selected and applied on
held-out tasks, against arms one switch away, with pre-registered tests.

Modules: ``protocol`` (what is committed before any GPU run, and each arm's config),
``catalog`` (the task sets' files and kernels, the technique skills, the distractors),
``techniques`` (each technique's snippet and its detector), ``sftdata`` (the SFT data and
the guard of its three rules), ``roles`` (the margin rule, enforced), ``book`` (the run's
verdicts: reused for policy turns, never for verification), ``probe`` (can a skill be
admitted at all, before any arm), ``metrics`` (one row per step), ``runner`` (one arm x
seed, resumable, with the held-out evaluation), ``prereg`` (the tests (a)-(e) and their
bootstrap intervals), ``report`` (the JSON, PNGs, table and the docs' verdicts). The new
tasks are in ``tasks/``, their variants in ``variants/``, the distractor skills in
``distractors.jsonl``.
"""
