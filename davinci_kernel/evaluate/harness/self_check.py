"""The harness self-check's candidate: a problem judged as its own candidate (``ModelNew``
the problem's ``Model``), for which the harness must read a correct verdict and a speedup
of 1.00, and the custom-kernel flags it waives (the reference has no custom kernel).

Does not cover: running the self-check over a suite (``suite/selfcheck.py``).
"""

from __future__ import annotations

from ...records import EvalResult

SELF_CHECK_WAIVED = {"subclasses_reference", "no_custom_kernel", "decoy_kernel", "low_coverage"}


def waive(res: EvalResult) -> None:
    """Self-check: drop the custom-kernel flags (the reference has none), saying so."""
    waived = [f for f in res.flags if f in SELF_CHECK_WAIVED]
    if not waived:
        return
    res.flags = [f for f in res.flags if f not in SELF_CHECK_WAIVED]
    res.warnings.append(f"self_check: waived {', '.join(waived)} (the reference has no custom kernel)")
    kept = [m for m in (res.error_msg or "").split("; ") if m.split(":", 1)[0] not in waived]
    res.error_msg = "; ".join(kept) or None
    if res.error_kind == "rejected" and not res.flags:
        res.error_kind = None
        res.stage = "correctness"


def self_candidate(problem_source: str) -> str:
    """The problem judged as its own candidate: its source with ``ModelNew`` the same class.
    The harness then has to read a speedup of 1.00 and a correct verdict."""
    return f"{problem_source}\n\n\nclass ModelNew(Model):\n    pass\n"
