"""Work done once, or ahead: a batch's references and baselines prepared before their
candidates, the problem's construction work measured by the reference process, a
reference leaf's own facts kept for every comparison."""

from __future__ import annotations

import threading
import time

import pytest

from davinci_kernel.config import EvalConfig
from davinci_kernel.evaluate import Evaluator

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


def test_the_baseline_is_prepared_ahead_and_timed_before_its_candidates_load(task, tmp_path, monkeypatch):
    """A timed device's clean baseline (here a slow double on the CPU) is measured ahead of
    a batch's candidates, after the task's reference; a candidate sends its job only once
    its task's baseline is done, so no candidate code of the task is loaded while the
    figure it is held to is timed."""
    import dataclasses

    other = dataclasses.replace(task, source=task.source.replace("* 2", "* 3"))
    cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path), self_check=True, trials=2, perturb_shapes=False)
    with Evaluator(cfg, workers=1) as ev:
        log: list = []
        cached: dict = {}
        lock = threading.Lock()

        def baseline(t, variant, overrides, seeds, device):
            with ev.trusted.key_lock(("base", t.hash)):  # one measurement per task, others wait for it
                if t.hash not in cached:
                    log.append(("baseline", t.hash, threading.current_thread().name))
                    time.sleep(0.3)
                    cached[t.hash] = {"eager_ms": 1.0, "seeds": len(seeds)}
                    log.append(("baseline done", t.hash, None))
                return cached[t.hash]

        from davinci_kernel.evaluate.harness.isolation.procs import WorkerProcess

        orig = WorkerProcess.send

        def send(w, msg):
            if msg.get("cmd") == "job":
                with lock:
                    log.append(("job", msg["job"]["task_source"], None))
            return orig(w, msg)

        monkeypatch.setattr(WorkerProcess, "send", send)
        monkeypatch.setattr(ev, "_wants_baseline", lambda: True)
        monkeypatch.setattr(ev, "_prepares_ahead", lambda: True)  # as on a GPU
        monkeypatch.setattr(ev.trusted, "baseline", baseline)
        out = ev.evaluate_many([(task, None), (other, None)])
    assert all(r.correct for r in out)
    assert [h for what, h, _ in log if what == "baseline"] == [task.hash, other.hash]
    assert any(who.startswith("dvk-ahead") for what, _, who in log if what == "baseline")
    for t in (task, other):  # each job after its task's baseline was done
        done = log.index(("baseline done", t.hash, None))
        jobs = [i for i, (what, src, _) in enumerate(log) if what == "job" and src.startswith(t.source.strip()[:200])
                and ("* 3" in src) == ("* 3" in t.source)]
        assert jobs and all(i > done for i in jobs)
    assert cached[task.hash]["seeds"] == 2


def test_a_batch_prepares_its_tasks_references_ahead_of_their_candidates(task, tmp_path, monkeypatch):
    """``evaluate_many`` computes each task's reference entry for the evaluator's draw on a
    thread of its own, in the batch's order, while candidates of earlier tasks run: the
    entry its candidates then find cached (computed once per task, and the verdicts are
    those of a batch judged without it)."""
    import dataclasses

    other = dataclasses.replace(task, source=task.source.replace("* 2", "* 3"))
    cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path), self_check=True, trials=2, perturb_shapes=False)
    with Evaluator(cfg, workers=1) as ev:
        asked: list = []
        real = ev.trusted.reference
        monkeypatch.setattr(ev, "_prepares_ahead", lambda: True)  # as on a GPU

        def reference(t, *args):
            got = real(t, *args)
            asked.append((t.hash, threading.current_thread().name, id(got)))
            return got

        monkeypatch.setattr(ev.trusted, "reference", reference)
        out = ev.evaluate_many([(task, None), (other, None), (other, None)])
    assert [r.correct for r in out] == [True, True, True] and out[2].reused
    ahead = [(h, e) for h, who, e in asked if who.startswith("dvk-ahead")]
    assert [h for h, _ in ahead] == [task.hash, other.hash]  # in the batch's order
    by_task = {h: {e for hh, _, e in asked if hh == h} for h in (task.hash, other.hash)}
    assert all(len(v) == 1 for v in by_task.values())  # one entry per task, whoever asked first


def test_a_batch_leaves_tasks_of_unknown_size_to_their_candidates(task, tmp_path, monkeypatch):
    """A task the meta device cannot size runs alone: nothing is prepared for it ahead."""
    cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path), self_check=True, trials=2, perturb_shapes=False)
    with Evaluator(cfg, workers=1) as ev:
        who: list = []
        real = ev.trusted.reference
        monkeypatch.setattr(ev, "_prepares_ahead", lambda: True)  # as on a GPU
        monkeypatch.setattr(ev.trusted, "sizes", lambda variant, device: None)
        monkeypatch.setattr(ev.trusted, "reference",
                            lambda *a: who.append(threading.current_thread().name) or real(*a))
        out = ev.evaluate_many([(task, None), (task, "# another\n" + task.source)])
    assert out[0].correct and not any(w.startswith("dvk-ahead") for w in who)


def test_the_models_construction_work_comes_from_the_reference_process(tmp_path, monkeypatch):
    """The problem's Model's construction work, against which a candidate's own construction
    is charged (``init_precompute``), is measured once per task and size by the reference
    process and handed to each worker (the job, the perturbed size's answer): the coverage
    is the one the worker's own measure gives, on the same draw, and the cheat stays caught."""
    from conftest import FIXTURES, fixture_meta, fixture_task

    from davinci_kernel.evaluate.harness import conversation
    from davinci_kernel.evaluate.shared import protocol

    path = FIXTURES / "cheats" / "init_precompute.py"
    items = [(fixture_task(fixture_meta(path)["task"]), path.read_text())]

    def judged() -> tuple:
        cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path), input_seed=1234)
        with Evaluator(cfg, workers=1) as ev:
            r = ev.evaluate_fresh(items)[0]
            entry = next(iter(ev.refs._entries.values()))
        return r, entry

    shared, entry = judged()
    assert entry["ref_init_work"] is not None and entry["perturb_init_work"] is not None
    to_dict, answer = protocol.CandidateJob.to_dict, conversation.Conversation._answer

    def own_answer(self, msg):  # the worker measures the perturbed Model's construction itself
        self.ref = {**self.ref, "perturb_init_work": None}
        return answer(self, msg)

    monkeypatch.setattr(protocol.CandidateJob, "to_dict", lambda self: {**to_dict(self), "ref_init_work": None})
    monkeypatch.setattr(conversation.Conversation, "_answer", own_answer)
    own, _ = judged()
    assert shared.error_kind == own.error_kind and "low_coverage" in shared.flags and not shared.correct
    assert shared.coverage == own.coverage


def test_a_reference_leafs_own_facts_are_computed_once_and_change_nothing(monkeypatch):
    """``compare`` reads a reference leaf's low-mantissa share and norm once per remembered
    leaf (the reference cache's, compared with every candidate of a task); the comparison is
    the one computed afresh, and a leaf nobody remembered is measured every time."""
    import dataclasses

    import torch

    from davinci_kernel.evaluate.harness import correctness
    from davinci_kernel.evaluate.harness.correctness import REFERENCE_FACTS, compare

    torch.manual_seed(0)
    ref = torch.randn(3000)
    outs = [ref + 1e-4 * torch.randn(3000), ref.bfloat16().float(), torch.zeros(3000)]
    fresh = [dataclasses.asdict(compare([ref], [x], 1e-2, 1e-2)) for x in outs]
    calls = []
    real = correctness._low_mantissa_share
    monkeypatch.setattr(correctness, "_low_mantissa_share", lambda t: calls.append(t is ref) or real(t))
    REFERENCE_FACTS.remember(ref)
    kept = [dataclasses.asdict(compare([ref], [x], 1e-2, 1e-2)) for x in outs]
    assert kept == fresh and not fresh[2]["ok"]
    assert calls.count(True) == 1  # the reference's share once, each candidate's every time
    other = ref.clone()
    compare([other], [outs[0]], 1e-2, 1e-2)
    compare([other], [outs[0]], 1e-2, 1e-2)
    assert calls.count(False) == len(outs) + 2 + 2


def test_the_low_mantissa_share_is_read_from_the_bits():
    """Nonzero values (NaN counts, -0.0 does not) whose low 13 mantissa bits are zero, as a
    share; 0 under 64 nonzero values: the gather-based definition, value for value."""
    import torch

    from davinci_kernel.evaluate.harness.correctness import _low_mantissa_share

    def by_gather(t):
        nz = t[t != 0]
        return 0.0 if nz.numel() < 64 else float(((nz.contiguous().view(torch.int32) & 0x1FFF) == 0).float().mean())

    torch.manual_seed(1)
    cases = [torch.randn(5000), torch.randn(5000).half().float(), torch.zeros(500), torch.full((63,), 1.0),
             torch.tensor([0.0, -0.0, float("nan"), 1.0, float("inf"), 1e-40] * 30),
             torch.randn(4000).bfloat16().float() * torch.randint(0, 2, (4000,)), torch.randn(64, 80).t()]
    assert [_low_mantissa_share(t) for t in cases] == [by_gather(t) for t in cases]


def test_nothing_is_prepared_for_a_task_whose_candidates_all_fail_statically(task, tmp_path, monkeypatch):
    """A task none of whose candidates gets past the static checks needs no reference: the
    batch prepares nothing for it (its candidates are refused before any is asked for)."""
    cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path), trials=2, perturb_shapes=False)
    with Evaluator(cfg, workers=1) as ev:
        asked: list = []
        monkeypatch.setattr(ev, "_prepares_ahead", lambda: True)  # as on a GPU
        monkeypatch.setattr(ev.trusted, "reference", lambda *a: asked.append(a) or {"error": "not asked"})
        out = ev.evaluate_many([(task, "import subprocess\nclass ModelNew:\n    pass\n"), (task, "this is not python (")])
    assert all(r.stage == "static" and not r.correct for r in out), [(r.stage, r.error_kind) for r in out]
    assert asked == []
