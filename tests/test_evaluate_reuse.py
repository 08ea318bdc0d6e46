"""eval.reuse_verdicts: a source judged once on a task gets that verdict again, also when
the same source is given twice at once; transient failures are judged anew."""

from __future__ import annotations

import pytest

from davinci_kernel.config import EvalConfig
from davinci_kernel.evaluate import Evaluator
from davinci_kernel.records import EvalResult

_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2


def get_inputs():
    return [torch.randn(32, 40)]


def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    from davinci_kernel.tasks import load_task_file

    path = tmp_path_factory.mktemp("task") / "tanh2.py"
    path.write_text(_TASK)
    return load_task_file(path)


@pytest.fixture(scope="module")
def reusing(tmp_path_factory):
    """One evaluator for the module; each test gives a problem text of its own (new verdicts)."""
    # self_check: the problem's own Model as the candidate (cheap, and its verdict is correct)
    cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path_factory.mktemp("cache")), self_check=True,
                     reuse_verdicts=True, trials=2, perturb_shapes=False)
    with Evaluator(cfg, workers=2) as ev:
        yield ev


def _variant(task, tag: str):
    """The same problem with a comment line of its own: another task hash, no verdict yet."""
    import dataclasses

    return dataclasses.replace(task, source=task.source + f"\n# {tag}\n")


def test_the_same_source_is_judged_once(task, reusing):
    ev, task = reusing, _variant(task, "once")
    first = ev.evaluate(task)
    again = ev.evaluate(task)
    both = ev.evaluate_many([(task, None), (task, None)])
    assert first.correct and not first.reused
    assert again.reused and again.correct and again.max_abs_diff == first.max_abs_diff
    assert all(r.reused for r in both)  # judged earlier: neither runs again
    assert again.to_dict() | {"reused": False, "eval_seconds": 0, "phase_seconds": {}} == \
        first.to_dict() | {"eval_seconds": 0, "phase_seconds": {}}


def test_given_twice_at_once_one_is_judged_and_one_reuses(task, reusing):
    task = _variant(task, "twice")
    both = reusing.evaluate_many([(task, None), (task, None)])
    assert sorted(r.reused for r in both) == [False, True] and all(r.correct for r in both)


@pytest.mark.parametrize("kind,reused", [("harness_error", False), ("timeout", False), ("no_worker", False),
                                         ("runtime_error", True), (None, True)])
def test_transient_failures_are_judged_again(task, tmp_path, kind, reused):
    """A unit test of the rule alone: the judging step is a double that counts its calls."""
    cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path), reuse_verdicts=True)
    ev = Evaluator.__new__(Evaluator)  # no processes: only the reuse rule is exercised
    ev.cfg = cfg
    ev._verdicts, ev._verdict_locks = {}, {}
    import threading

    ev._verdicts_lock = threading.Lock()
    calls = []

    def judged(t, source, t0):
        calls.append(source)
        return EvalResult(task=t.name, error_kind=kind)

    ev._judged = judged
    a = ev.evaluate(task, "src")
    b = ev.evaluate(task, "src")
    assert len(calls) == (1 if reused else 2) and b.reused is reused and not a.reused
    assert not ev.evaluate(task, "src # another text").reused  # another text is another candidate


def test_a_fresh_evaluation_never_reuses(task, reusing):
    """A skill's verification asks for a fresh verdict (``evaluate_fresh``): judged anew even
    with a verdict on record, and not kept for later reuse."""
    ev, task = reusing, _variant(task, "fresh")
    fresh = ev.evaluate_fresh([(task, None), (task, None)])
    assert all(not r.reused and r.correct for r in fresh)
    first = ev.evaluate(task)
    assert not first.reused  # the fresh verdicts were not kept
    again = ev.evaluate_fresh([(task, None)])[0]
    assert not again.reused
