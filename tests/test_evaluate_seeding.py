"""A stochastic reference (dropout in training mode, as KernelBench level 2 has) is judged on
the same random stream on both sides: every compared forward call, in the reference process
and in the candidate's, starts from the harness's seed for that call, whatever ran before it
(building the model, making inputs, another trial). The problem's own Model judged as its
candidate is then correct at the task's sizes and at the perturbed ones."""

from __future__ import annotations

import pytest

_DROPOUT = '''import torch
import torch.nn as nn

batch_size = 64
in_features = 96
out_features = 80


class Model(nn.Module):
    """Linear, dropout (training mode: a fresh random mask every call), softmax."""

    def __init__(self, in_features, out_features, p):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return torch.softmax(self.drop(self.fc(x)), dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, 0.5]
'''

_CANDIDATE = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """The same computation written out: the mask comes from the same random stream."""

    def __init__(self, in_features, out_features, p):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        self.p = p

    def forward(self, x):
        return torch.softmax(F.dropout(self.fc(x), self.p, training=True), dim=1)
'''


@pytest.fixture(scope="module")
def dropout_task(tmp_path_factory):
    from davinci_kernel.tasks import load_task_file

    path = tmp_path_factory.mktemp("tasks") / "dropout.py"
    path.write_text(_DROPOUT)
    return load_task_file(path)


@pytest.mark.parametrize("self_check", [True, False], ids=["the-problems-own-model", "a-rewritten-candidate"])
def test_a_stochastic_reference_is_judged_on_the_same_random_stream(dropout_task, tmp_path, self_check):
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    cfg = EvalConfig(device="cpu", cache_dir=str(tmp_path / "cache"), self_check=self_check, trials=3,
                     perturb_shapes=True, cpu_small_shapes=False)
    with Evaluator(cfg, workers=1) as ev:
        res = ev.evaluate(dropout_task, None if self_check else _CANDIDATE)
    assert res.error_kind is None and res.trials_passed == 3, (res.error_kind, res.error_msg)
    # torch ops only: the rewritten candidate has no kernel of its own (on the CPU the one flag it can get)
    assert res.flags == ([] if self_check else ["no_custom_kernel"]), (res.flags, res.error_msg)
    assert res.correct == self_check
    assert not any(w.startswith("perturbation_skipped") for w in res.warnings), res.warnings
    # seeded per call, the reference gives the same outputs for the same inputs
    assert not any("nondeterministic" in w for w in res.warnings), res.warnings


@pytest.mark.gpu
def test_a_stochastic_reference_is_timed_and_its_timed_outputs_agree(dropout_task, tmp_path):
    """On the GPU the last timed round's outputs are compared too: that call starts from its
    set's seed as well, so a stochastic reference is not flagged inconsistent under timing."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    cfg = EvalConfig(device="cuda", cache_dir=str(tmp_path / "cache"), self_check=True, trials=3,
                     baseline_compile=False)
    with Evaluator(cfg, workers=1) as ev:
        res = ev.evaluate(dropout_task)
    assert res.correct and res.flags == [], (res.error_kind, res.error_msg, res.flags)
    assert res.timing_available and abs(res.speedup - 1.0) < 0.1, res.speedup
