"""``dvk optimize`` keeps the best candidate: correct and fastest, else the one that got
furthest through the evaluation (``records.Stage.ORDER``)."""

from davinci_kernel.records import Episode, EvalResult, Stage, TaskGroup, Turn
from davinci_kernel.rollout.optimize import best_candidate


def _group(*results):
    turns = [Turn(role="policy", task="t", turn=i, parsed=f"code {i}", result=r) for i, r in enumerate(results)]
    return TaskGroup(task="t", episodes=[Episode("t", 0, 0, turns=turns)])


def test_failed_candidates_rank_by_how_far_they_got():
    compile_err = EvalResult(stage=Stage.COMPILE, error_kind="import_error")
    load_err = EvalResult(stage=Stage.LOAD, error_kind="no_modelnew")
    wrong = EvalResult(compiled=True, stage=Stage.CORRECTNESS, error_kind="wrong_output")
    assert best_candidate(_group(compile_err, load_err))[0] == "code 1"  # ModelNew() comes after the import
    assert best_candidate(_group(wrong, load_err, compile_err))[0] == "code 0"
    assert best_candidate(_group(EvalResult(stage=Stage.HARNESS), EvalResult(stage=Stage.STATIC)))[0] == "code 1"


def test_correct_and_fastest_wins():
    slow = EvalResult(compiled=True, correct=True, stage=Stage.DONE, speedup=1.1)
    fast = EvalResult(compiled=True, correct=True, stage=Stage.DONE, speedup=2.0)
    timed_wrong = EvalResult(compiled=True, stage=Stage.TIMING, speedup=9.0)
    code, result, where = best_candidate(_group(slow, timed_wrong, fast))
    assert (code, result.speedup, where) == ("code 2", 2.0, (0, 0, 2))
