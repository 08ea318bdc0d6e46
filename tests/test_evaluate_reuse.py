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


def _counting(tmp_path, kinds: dict):
    """An evaluator without processes whose ``evaluate`` is a double: each call's source is
    recorded; ``kinds`` gives a source's error kind (None: correct)."""
    import threading

    ev = Evaluator.__new__(Evaluator)
    ev.cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path))  # reuse_verdicts off
    ev.pool = [None, None]  # two slots
    calls, lock = [], threading.Lock()

    def evaluate(t, source, fresh=False):
        with lock:
            calls.append(source)
        kind = kinds.get(source)
        return EvalResult(task=t.name, error_kind=kind, correct=kind is None, speedup=1.5, eval_seconds=2.0,
                          phase_seconds={"correctness": 1.0})

    ev.evaluate = evaluate
    return ev, calls


def test_duplicates_in_one_batch_are_judged_once_without_reuse_verdicts(task, tmp_path):
    """An RL group samples the same text more than once: with eval.reuse_verdicts off, one
    batch still judges each distinct (task, source) once and copies the verdict to the
    duplicates (marked ``reused``, no phases of their own); another text, or the same text
    on another task, is judged on its own; progress is told of every item."""
    other = _variant(task, "other task")
    ev, calls = _counting(tmp_path, {})
    told = []
    items = [(task, "a"), (task, "b"), (task, "a"), (other, "a"), (task, "a")]
    out = ev.evaluate_many(items, progress=lambda i, r: told.append(i))
    assert sorted(calls) == ["a", "a", "b"]  # a on task, b on task, a on the other task
    assert [r.reused for r in out] == [False, False, True, False, True]
    assert all(r.correct and r.speedup == 1.5 for r in out)
    assert out[2].phase_seconds == {} and out[0].phase_seconds == {"correctness": 1.0}
    assert out[2] is not out[0] and sorted(told) == list(range(5))


def test_fresh_batches_and_transient_failures_judge_every_duplicate(task, tmp_path):
    """``evaluate_fresh`` judges every item; a leader whose verdict may go otherwise next
    time (a timeout, a harness error) leaves each duplicate to be judged on its own."""
    ev, calls = _counting(tmp_path, {"t": "timeout", "w": "wrong_output"})
    fresh = ev.evaluate_fresh([(task, "a"), (task, "a")])
    assert calls == ["a", "a"] and not any(r.reused for r in fresh)
    calls.clear()
    out = ev.evaluate_many([(task, "t"), (task, "t"), (task, "w"), (task, "w")])
    assert sorted(calls) == ["t", "t", "w"]  # the timeout again, the wrong output once
    assert [r.reused for r in out] == [False, False, False, True]
    assert out[3].error_kind == "wrong_output" and not out[3].correct


def test_the_ray_evaluator_judges_a_batchs_duplicates_once(task):
    """The Ray evaluator keeps the local contract: one judgement per distinct (task, text) of
    a batch, copies marked ``reused``; duplicates of a transient failure judged each."""
    from types import SimpleNamespace

    from davinci_kernel.evaluate.harness.ray_pool import RayEvaluator

    judged = []

    class Ref:
        def __init__(self, value):
            self.value = value

    class Actor:
        def __init__(self):
            self.evaluate = SimpleNamespace(remote=self.remote)

        def remote(self, task_dict, source, fresh):
            judged.append(source)
            kind = "timeout" if source == "t" else None
            return Ref(EvalResult(task=task_dict["name"], error_kind=kind, correct=kind is None).to_dict())

    ev = RayEvaluator.__new__(RayEvaluator)
    ev.ray = SimpleNamespace(wait=lambda refs, num_returns=1: (refs[:1], refs[1:]), get=lambda ref: ref.value)
    ev.actors = [Actor(), Actor()]
    out = ev.evaluate_many([(task, "a"), (task, "a"), (task, "t"), (task, "t"), (task, "b")])
    assert sorted(judged) == ["a", "b", "t", "t"]
    assert [r.reused for r in out] == [False, True, False, False, False]
    judged.clear()
    assert not any(r.reused for r in ev.evaluate_fresh([(task, "a"), (task, "a")])) and judged == ["a", "a"]
