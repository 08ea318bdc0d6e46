"""Sampling from the trained model itself (rl/local_gen.py): seeded repeats, sampling
log-probs equal to the trainer's scoring of the same tokens, EOS cut-off, left padding."""

from __future__ import annotations

import pytest
import torch


def _setup(tmp_path, device="cpu"):
    from davinci_kernel.llm.tiny import build_tiny
    from davinci_kernel.rl.local_gen import LocalGenerator
    from davinci_kernel.rl.modeling import load_model, load_tokenizer

    path = build_tiny(tmp_path / "m")
    model = load_model(path, bf16=False, grad_checkpointing=False).to(device)
    return model, LocalGenerator(model, load_tokenizer(path), device=torch.device(device))


def _scored(model, prompt: list[int], comp: list[int], device) -> torch.Tensor:
    """Log-probs (n,) of ``comp`` after ``prompt``, teacher-forced, as the trainer scores them."""
    ids = torch.tensor([prompt + comp], device=device)
    with torch.no_grad():
        logits = model(input_ids=ids, position_ids=torch.arange(ids.shape[1], device=device)[None]).logits[0]
    lp = logits.float().log_softmax(-1)
    return lp[len(prompt) - 1:-1].gather(-1, torch.tensor(comp, device=device)[:, None]).squeeze(-1).cpu()


PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [40, 41, 42, 43]]  # different lengths: left padding


def _check(tmp_path, device):
    model, gen = _setup(tmp_path, device)
    a = gen.generate(PROMPTS, max_new_tokens=13, generator=torch.Generator().manual_seed(3), stop_at_eos=False)
    b = gen.generate(PROMPTS, max_new_tokens=13, generator=torch.Generator().manual_seed(3), stop_at_eos=False)
    assert [x.token_ids for x in a] == [x.token_ids for x in b]  # a seeded run repeats
    for p, c in zip(PROMPTS, a):
        assert c.prompt_token_ids == p and len(c.token_ids) == len(c.logprobs) == 13 and c.finish_reason == "length"
        torch.testing.assert_close(torch.tensor(c.logprobs), _scored(model, p, c.token_ids, device),
                                   atol=1e-4, rtol=1e-4)


def test_seeded_and_logprobs_match_scoring_cpu(tmp_path):
    _check(tmp_path, "cpu")


@pytest.mark.gpu
def test_seeded_and_logprobs_match_scoring_gpu(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    _check(tmp_path, "cuda")


def test_sampling_seeds_come_from_the_callers_generator_or_the_seeded_global_one():
    """A request without its own generator (the rollout's) still samples repeatably in a run
    seeded once: its device seed is drawn from torch's global generator, never from the OS."""
    from davinci_kernel.rl.local_gen import draw_seed

    torch.manual_seed(5)
    a = [draw_seed(None) for _ in range(3)]
    torch.manual_seed(5)
    assert [draw_seed(None) for _ in range(3)] == a and len(set(a)) == 3
    assert draw_seed(torch.Generator().manual_seed(1)) == draw_seed(torch.Generator().manual_seed(1))


@pytest.mark.gpu
def test_unseeded_sampling_on_the_gpu_repeats_after_a_global_seed(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    _model, gen = _setup(tmp_path, "cuda")
    runs = []
    for _ in range(2):
        torch.manual_seed(11)
        runs.append([c.token_ids for c in gen.generate(PROMPTS, max_new_tokens=9, stop_at_eos=False)])
    assert runs[0] == runs[1]


@pytest.mark.parametrize("max_new", [1, 5, 8, 9, 30])
def test_eos_ends_each_completion_after_its_eos(tmp_path, max_new):
    """With every token an end token, each completion is exactly its first token, finished,
    however many steps the loop ran before it looked."""
    _, gen = _setup(tmp_path)
    gen.eos = set(range(gen.model.config.vocab_size))
    out = gen.generate(PROMPTS, max_new_tokens=max_new, generator=torch.Generator().manual_seed(0))
    assert [len(c.token_ids) for c in out] == [1, 1, 1]
    assert all(c.finish_reason == "stop" and len(c.logprobs) == 1 for c in out)


def test_eos_of_one_row_leaves_the_others_running(tmp_path):
    _, gen = _setup(tmp_path)
    free = gen.generate(PROMPTS, max_new_tokens=12, generator=torch.Generator().manual_seed(1), stop_at_eos=False)
    stop = free[0].token_ids[4]  # the first row's fifth token becomes the end token
    gen.eos = {stop}
    out = gen.generate(PROMPTS, max_new_tokens=12, generator=torch.Generator().manual_seed(1))
    for f, o in zip(free, out):
        cut = f.token_ids.index(stop) + 1 if stop in f.token_ids else len(f.token_ids)
        assert o.token_ids == f.token_ids[:cut]
        assert o.finish_reason == ("stop" if stop in f.token_ids else "length")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_local_backend_logprobs_are_what_the_trainer_scores(tmp_path, temperature, device):
    """The rollout backend of rl.env=rollout: chat requests of different lengths, sampled
    through the decode loop; each reply's log-probs equal the trainer's scoring of the same
    tokens at the sampling temperature (update.row_logprobs' math), a seeded request repeats,
    and the model goes back to training mode."""
    from davinci_kernel.llm.base import GenRequest
    from davinci_kernel.rl.local_gen import LocalBackend
    from davinci_kernel.rl.losses import token_logprobs

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    model, gen = _setup(tmp_path, device)
    model.train()
    b = LocalBackend(model, gen.tokenizer, max_batch=4)
    reqs = [GenRequest([{"role": "user", "content": "relu kernel " + "x" * (4 * i)}], temperature=temperature,
                       max_new_tokens=9, seed=11) for i in range(3)]
    out = b.generate_sync(reqs)
    again = b.generate_sync(reqs)
    assert [c.token_ids for c in out] == [c.token_ids for c in again] and model.training
    for c in out:
        assert c.error is None and 0 < len(c.token_ids) == len(c.logprobs) <= 9
        ids = torch.tensor([c.prompt_token_ids + c.token_ids], device=device)
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(c.prompt_token_ids) - 1:-1]
        ref = token_logprobs(logits, torch.tensor(c.token_ids, device=device), temperature).cpu()
        torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=1e-4)
