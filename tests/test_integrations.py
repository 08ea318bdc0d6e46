"""The harness as a reward for TRL and verl.

TRL is installed here: a real ``GRPOTrainer`` step on a tiny Qwen3 runs on the CPU with our
reward function. verl does not install beside this package's transformers (it pins an older
one), so its adapter is tested against verl's documented custom-reward signature
(``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)``,
returning a float or a dict with ``score``), not inside verl.
"""

from __future__ import annotations

import inspect

import pytest
from conftest import RELU, relu_kernel

from davinci_kernel.config import RewardConfig
from davinci_kernel.errors import UsageError
from davinci_kernel.integrations.trl_reward import kernel_reward_func
from davinci_kernel.integrations.verl_reward import _SCORERS, compute_score
from davinci_kernel.rollout.rewards import policy_reward


def _fenced(code: str) -> str:
    return f"Here is the kernel.\n```python\n{code}```\n"


def test_trl_reward_judges_each_completion(cpu_evaluator):
    f = kernel_reward_func(kind="released")
    f.scorer._evaluator = cpu_evaluator  # the session's CPU pool
    good, wrong = _fenced(relu_kernel()), _fenced(relu_kernel(store="x"))
    conv = [{"role": "assistant", "content": good}]  # TRL's conversational completions
    out = f(prompts=["p"] * 4, completions=[good, wrong, "no code at all", conv], task=[RELU] * 4)
    assert f.__name__ == "dvk_released" and len(out) == 4 and all(isinstance(x, float) for x in out)
    res = f.scorer.last
    assert res[0].correct and not res[1].correct and res[2] is None and res[3].correct
    assert out[0] == policy_reward(res[0], RewardConfig()) > 0 and out[1] == 0.0 and out[2] == 0.0
    assert out[3] == out[0]
    tiered = kernel_reward_func(kind="tiered")
    tiered.scorer._evaluator = cpu_evaluator
    assert tiered(completions=[wrong], task=[RELU]) == [-0.3]  # incorrect, in the tiered recipe
    with pytest.raises(UsageError, match="no 'task' column"):
        f(prompts=["p"], completions=[good])


def test_verl_compute_score_follows_the_documented_signature(cpu_evaluator):
    params = list(inspect.signature(compute_score).parameters)
    assert params[:4] == ["data_source", "solution_str", "ground_truth", "extra_info"]
    assert inspect.signature(compute_score).parameters["extra_info"].default is None
    _SCORERS.clear()
    from davinci_kernel.integrations.kernel_reward import KernelReward

    s = KernelReward(kind="fastp")
    s._evaluator = cpu_evaluator
    _SCORERS[("fastp", "builtin", "cpu")] = s
    got = compute_score("kernelbench", _fenced(relu_kernel()), RELU, None, reward_kind="fastp", device="cpu")
    assert got["correct"] == 1.0 and got["compiled"] == 1.0 and got["score"] == pytest.approx(0.2)  # p=0 of 5
    got = compute_score("kernelbench", "no code", "ignored", {"task": RELU}, reward_kind="fastp", device="cpu")
    assert got == {"score": 0.0, "correct": 0.0, "compiled": 0.0, "speedup": 0.0}
    _SCORERS.clear()


def test_a_real_grpo_step_with_our_reward(tmp_path):
    trl = pytest.importorskip("trl")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from davinci_kernel.llm.tiny import build_tiny

    path = build_tiny(tmp_path / "tiny")
    model, tok = AutoModelForCausalLM.from_pretrained(str(path)), AutoTokenizer.from_pretrained(str(path))
    data = Dataset.from_dict({"prompt": ["Write ModelNew for this problem."] * 4, "task": [RELU] * 4})
    reward = kernel_reward_func(kind="released")
    seen = []

    def counted(prompts=None, completions=None, **kw):
        out = reward(prompts=prompts, completions=completions, **kw)
        seen.append((len(completions), out))
        return out

    counted.__name__ = reward.__name__
    args = trl.GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, num_generations=2,
                          max_completion_length=8, max_steps=1, learning_rate=1e-3, report_to=[], logging_steps=1,
                          use_cpu=True, bf16=False, save_strategy="no", seed=0)
    trainer = trl.GRPOTrainer(model=model, reward_funcs=[counted], args=args, train_dataset=data,
                              processing_class=tok)
    trainer.train()
    reward.scorer.close()
    assert seen and all(n == len(out) for n, out in seen)
    assert all(x == 0.0 for _, out in seen for x in out)  # a random tiny model writes no kernel: no_code = 0
    logged = [h for h in trainer.state.log_history if "rewards/dvk_released/mean" in h]
    assert logged and logged[0]["rewards/dvk_released/mean"] == 0.0
    assert trainer.state.global_step == 1
