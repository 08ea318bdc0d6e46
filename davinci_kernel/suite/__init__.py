"""Suites of candidates judged by the evaluator, with Fast_p tables: `dvk tasks list`,
`dvk eval` and `dvk bench`.

It sits above both ``evaluate`` and ``report`` (it uses the evaluator and the report's
tables). Modules: ``commands`` (the three commands' arguments and printing), ``bench``
(the `dvk bench` run: pairing tasks with candidate files, the run directory, resuming,
the summary), ``selfcheck`` (the harness self-check's verdicts, `--candidates self`).
"""
