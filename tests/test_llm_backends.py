"""hf: backend on a tiny local model, and the scripted double."""

import pytest
import torch

from davinci_kernel.errors import UsageError
from davinci_kernel.llm import GenRequest, make_backend
from davinci_kernel.llm.scripted import ScriptedBackend
from davinci_kernel.llm.tiny import build_tiny


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    path = build_tiny(tmp_path_factory.mktemp("tiny") / "m")
    return make_backend(f"hf:{path}", max_batch=2)


def test_hf_batched_sampling_logprobs_match_forward_pass(hf):
    msgs = [{"role": "user", "content": "write a relu kernel"}]
    reqs = [GenRequest(msgs, temperature=1.0, max_new_tokens=10, seed=1) for _ in range(3)]
    reqs.append(GenRequest([{"role": "user", "content": "a much longer prompt " * 4}], temperature=0, max_new_tokens=8))
    out = hf.generate_sync(reqs)
    assert len(out) == 4
    for c in out:
        assert c.error is None and c.token_ids and len(c.token_ids) == len(c.logprobs)
        ids = torch.tensor([c.prompt_token_ids + c.token_ids])
        with torch.no_grad():
            lp = hf.model(ids).logits.float().log_softmax(-1)[0]
        p = len(c.prompt_token_ids)
        ref = [lp[p - 1 + j, t].item() for j, t in enumerate(c.token_ids)]
        assert max(abs(a - b) for a, b in zip(ref, c.logprobs)) < 1e-4
    assert hf.tokenizer.decode(out[3].prompt_token_ids).startswith("<|im_start|>user\na much longer")


def test_hf_greedy_is_deterministic(hf):
    r = GenRequest([{"role": "user", "content": "hello"}], temperature=0, max_new_tokens=8)
    a, b = hf.generate_sync([r, r])
    assert a.token_ids == b.token_ids


def test_hf_missing_dir_is_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no such model directory"):
        make_backend(f"hf:{tmp_path / 'nope'}")


def test_scripted_double_replies_and_failures():
    def respond(req):
        if "fail" in req.messages[-1]["content"]:
            raise ConnectionError("down")
        return "ok " + req.messages[-1]["content"]

    b = ScriptedBackend(respond)
    out = b.generate_sync([GenRequest([{"role": "user", "content": "a"}]),
                           GenRequest([{"role": "user", "content": "fail"}])])
    assert out[0].text == "ok a" and out[0].error is None
    assert out[1].text == "" and "down" in out[1].error


def test_script_spec_loads_respond(tmp_path):
    f = tmp_path / "s.py"
    f.write_text("def respond(request):\n    return 'hi'\n")
    assert make_backend(f"script:{f}").generate_sync([GenRequest([{"role": "user", "content": "x"}])])[0].text == "hi"
    with pytest.raises(UsageError):
        make_backend(f"script:{tmp_path / 'missing.py'}")


def test_hf_merges_concurrent_calls_into_one_batch(hf):
    import asyncio

    def reqs(text):
        return [GenRequest([{"role": "user", "content": text}], temperature=0, max_new_tokens=4)]

    async def go():
        before = hf.batches
        out = await asyncio.gather(hf.generate(reqs("a")), hf.generate(reqs("b") * 2), hf.generate(reqs("c")))
        return out, hf.batches - before

    (a, b, c), batches = asyncio.run(go())
    assert [len(a), len(b), len(c)] == [1, 2, 1] and batches == 1
    assert b[0].token_ids == b[1].token_ids and b[0].prompt_token_ids != a[0].prompt_token_ids


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_hf_samples_under_autocast_like_the_trainer(tmp_path, device):
    """float32 weights sampled under bf16 autocast: no dtype clash anywhere in generate, and
    the recorded log-probs are those of a forward pass under the same autocast."""
    from davinci_kernel.llm.hf_backend import HFBackend
    from davinci_kernel.rl.modeling import load_model, load_tokenizer

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    path = build_tiny(tmp_path / "m")
    model = load_model(path, bf16=False, grad_checkpointing=False).to(device).train()
    b = HFBackend(model=model, tokenizer=load_tokenizer(path), max_batch=3, autocast=torch.bfloat16)
    reqs = [GenRequest([{"role": "user", "content": "kernel " + "x" * (5 * i)}], temperature=1.0, max_new_tokens=6,
                       seed=i) for i in range(5)]  # two left-padded batches of at most 3
    seen = []
    hook = model.lm_head.register_forward_pre_hook(lambda m, a: seen.append(torch.is_autocast_enabled(device)))
    out = b.generate_sync(reqs)
    hook.remove()
    assert seen and all(seen)  # every forward of the sampling ran under autocast
    assert b.batches == 1 and model.training  # one call, training mode given back
    for c in out:
        assert c.error is None and len(c.token_ids) == len(c.logprobs) > 0
        ids = torch.tensor([c.prompt_token_ids + c.token_ids], device=device)
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
            lp = model(ids).logits.float().log_softmax(-1)[0]
        p = len(c.prompt_token_ids)
        ref = [lp[p - 1 + j, t].item() for j, t in enumerate(c.token_ids)]
        assert max(abs(x - y) for x, y in zip(ref, c.logprobs)) < 5e-2


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("b,h,kvh,length", [(1, 4, 2, 1), (3, 8, 2, 37), (2, 6, 3, 129)])
def test_grouped_sdpa_equals_repeated_heads(dtype, b, h, kvh, length, device):
    """A one-token query against a shared padding mask: same output as repeating every
    key/value head n_rep times and doing the softmax by hand."""
    from davinci_kernel.llm.grouped_decode import grouped_sdpa

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    g = torch.Generator().manual_seed(length)
    d = 16
    q = torch.randn(b, h, 1, d, generator=g).to(dtype)
    k = torch.randn(b, kvh, length, d, generator=g).to(dtype)
    v = torch.randn(b, kvh, length, d, generator=g).to(dtype)
    mask = torch.ones(b, 1, 1, length, dtype=torch.bool)
    for i in range(b):  # left padding of different widths, the last position always visible
        mask[i, ..., : min(i * 3, length - 1)] = False

    class Attn(torch.nn.Module):
        num_key_value_groups = h // kvh

    out, _ = grouped_sdpa(Attn(), q.to(device), k.to(device), v.to(device), mask.to(device), scaling=d ** -0.5)
    out = out.cpu()  # (B, 1, H, D)
    kr, vr = k.repeat_interleave(h // kvh, 1).float(), v.repeat_interleave(h // kvh, 1).float()
    s = (q.float() @ kr.transpose(-1, -2)) * d ** -0.5  # (B, H, 1, L)
    ref = s.masked_fill(~mask, float("-inf")).softmax(-1) @ vr  # (B, H, 1, D)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.float(), ref.transpose(1, 2), atol=tol, rtol=tol)


def test_grouped_decode_samples_what_sdpa_samples(tmp_path, monkeypatch):
    """Left-padded prompts of different lengths on a grouped-query model (4 query / 2
    key-value heads): greedy replies and their log-probs are the same with and without
    grouped single-token steps and with the prompt encoded in chunks, the grouped steps do
    run, and the model's setting comes back."""
    import davinci_kernel.llm.grouped_decode as gd
    from davinci_kernel.llm.hf_backend import HFBackend
    from davinci_kernel.rl.modeling import load_model, load_tokenizer

    path = build_tiny(tmp_path / "m", heads=4)
    model = load_model(path, bf16=False, grad_checkpointing=False)
    model.config._attn_implementation = "sdpa"
    b = HFBackend(model=model, tokenizer=load_tokenizer(path), max_batch=4)
    reqs = [GenRequest([{"role": "user", "content": "kernel " + "x" * (7 * i)}], temperature=0, max_new_tokens=6)
            for i in range(4)]
    steps = []
    real = gd.grouped_sdpa
    monkeypatch.setattr(gd, "grouped_sdpa", lambda m, q, *a, **k: (steps.append(q.shape[2]), real(m, q, *a, **k))[1])
    gd._registered = False  # register the counting wrapper
    grouped = b.generate_sync(reqs)
    assert model.config._attn_implementation == "sdpa" and steps.count(1) > 0
    b.grouped = False
    plain = b.generate_sync(reqs)
    gd._registered = False
    b.grouped, b.prefill_chunk = True, 5  # prompts encoded 5 tokens at a time
    chunked = b.generate_sync(reqs)
    for x, y in [*zip(grouped, plain), *zip(chunked, plain)]:
        assert x.token_ids == y.token_ids and len(x.token_ids) == 6
        assert max(abs(p - q) for p, q in zip(x.logprobs, y.logprobs)) < 1e-4


def test_grouped_decode_keeps_attention_off_cudnn_and_gives_the_setting_back(tmp_path):
    """Sampling's attention never goes to cuDNN (a new execution plan for every key length,
    milliseconds of host time per decode step), with or without a grouped-query model; the
    backend choice is what it was afterwards, also when the body raises."""
    from davinci_kernel.llm.grouped_decode import grouped_decode
    from davinci_kernel.rl.modeling import load_model

    before = torch.backends.cuda.cudnn_sdp_enabled()
    flash, efficient = torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.mem_efficient_sdp_enabled()
    for heads in (4, 2):  # grouped (4 query / 2 key-value heads), then plain
        model = load_model(build_tiny(tmp_path / f"m{heads}", heads=heads), bf16=False, grad_checkpointing=False)
        model.config._attn_implementation = "sdpa"
        with grouped_decode(model):
            assert not torch.backends.cuda.cudnn_sdp_enabled()
            assert torch.backends.cuda.mem_efficient_sdp_enabled() == efficient
            assert torch.backends.cuda.flash_sdp_enabled() == flash
        assert torch.backends.cuda.cudnn_sdp_enabled() == before
        with pytest.raises(RuntimeError), grouped_decode(model):
            raise RuntimeError("a failed sample")
        assert torch.backends.cuda.cudnn_sdp_enabled() == before and model.config._attn_implementation == "sdpa"


def test_hf_batch_out_of_memory_is_retried_in_halves(tmp_path, monkeypatch):
    """A generate call over more than two sequences runs out of memory: the batch is split
    until it fits, every request still gets its reply, and later batches start smaller."""
    from davinci_kernel.llm.hf_backend import HFBackend
    from davinci_kernel.rl.modeling import load_model, load_tokenizer

    path = build_tiny(tmp_path / "m")
    model = load_model(path, bf16=False, grad_checkpointing=False)
    b = HFBackend(model=model, tokenizer=load_tokenizer(path), max_batch=8)
    real, sizes = model.generate, []

    def generate(input_ids, **kw):
        sizes.append(input_ids.shape[0])
        if input_ids.shape[0] > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.53 GiB")
        return real(input_ids=input_ids, **kw)

    monkeypatch.setattr(model, "generate", generate)
    reqs = [GenRequest([{"role": "user", "content": f"kernel {i}"}], temperature=0, max_new_tokens=4)
            for i in range(7)]
    out = b.generate_sync(reqs)
    assert all(c.error is None and len(c.token_ids) == 4 for c in out)
    assert sizes[:3] == [7, 4, 2] and b.max_batch == 2
    again = b.generate_sync(reqs[:1])
    assert again[0].token_ids == out[0].token_ids  # a split batch samples what a whole one would
    b.max_batch = 1
    sizes.clear()
    monkeypatch.setattr(model, "generate", lambda **kw: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("oom")))
    (one,) = b.generate_sync(reqs[:1])
    assert one.error and "out of memory" in one.error and not one.token_ids
