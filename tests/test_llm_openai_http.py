"""The openai: backend against a real OpenAI-compatible HTTP server on loopback.

The server is a separate process (``python -m davinci_kernel.llm.serve``) backed by a
tiny transformers model built here; the client talks real HTTP through the openai package.
"""

import asyncio
import socket
import subprocess
import sys
import time

import pytest

from davinci_kernel.errors import UsageError
from davinci_kernel.llm import GenRequest, make_backend
from davinci_kernel.llm.tiny import build_tiny


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("tiny") / "tiny-qwen3")


def _start(tiny_dir, *extra):
    proc = subprocess.Popen([sys.executable, "-m", "davinci_kernel.llm.serve", "--model", str(tiny_dir),
                             "--port", "0", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r} {proc.stderr.read()[-2000:]}")
    return proc, line.split()[-1]


@pytest.fixture(scope="module")
def server(tiny_dir):
    proc, url = _start(tiny_dir)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def _msgs(text):
    return [{"role": "system", "content": "You write kernels."}, {"role": "user", "content": text}]


def test_generate_returns_text_token_ids_and_logprobs(server, tiny_dir):
    backend = make_backend(f"openai:{server}")

    async def go():
        await backend.check()
        reqs = [GenRequest(_msgs(f"task {i}"), temperature=1.0, max_new_tokens=12) for i in range(3)]
        reqs.append(GenRequest(_msgs("greedy"), temperature=0.0, max_new_tokens=12))
        out = await backend.generate(reqs)
        await backend.aclose()
        return out

    out = asyncio.run(go())
    assert backend.model == "tiny-qwen3"  # learned from /v1/models
    assert backend.served_model == {"id": "tiny-qwen3", "owned_by": "davinci-kernel", "created": 0}
    assert len(out) == 4
    for c in out:
        assert c.error is None
        assert c.token_ids and len(c.token_ids) == len(c.logprobs) <= 12
        assert all(lp <= 0.0 for lp in c.logprobs)
        assert c.prompt_token_ids and len(c.prompt_token_ids) > 5
    # ids decode to the text the server sent
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    assert tok.decode(out[0].token_ids, skip_special_tokens=True) == out[0].text
    # the prompt ids are the chat template the model saw
    assert tok.decode(out[3].prompt_token_ids).startswith("<|im_start|>system\nYou write kernels.")


def test_strict_server_gets_plain_request_and_retries_503(tiny_dir):
    proc, url = _start(tiny_dir, "--strict", "--fail-first", "2")
    try:
        backend = make_backend(f"openai:{url}#tiny-qwen3")
        out = backend.generate_sync([GenRequest(_msgs("x"), max_new_tokens=6)])
        assert out[0].error is None, out[0].error
        assert out[0].logprobs and out[0].token_ids is None  # standard logprobs only
        assert backend.use_extras is False
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_is_one_usage_line():
    url = f"http://127.0.0.1:{_free_port()}/v1"
    backend = make_backend(f"openai:{url}#m")
    t = time.time()
    with pytest.raises(UsageError) as e:
        asyncio.run(backend.check())
    assert time.time() - t < 5  # the check asks once: no client retries
    msg = str(e.value)
    assert url in msg and "vllm serve" in msg and "\n" not in msg


def test_server_dying_mid_run_gives_failed_completion_not_exception():
    """The client's own retries (max_retries=2: three attempts) end in a failed Completion."""
    url = f"http://127.0.0.1:{_free_port()}/v1"
    backend = make_backend(f"openai:{url}#m", max_retries=2)
    t = time.time()
    out = backend.generate_sync([GenRequest(_msgs("x"), max_new_tokens=4)] * 2)
    assert time.time() - t < 10
    assert all(c.error and "3 attempts" in c.error for c in out)


@pytest.mark.parametrize("spec", ["", "openai", "gpt4", "openai:localhost:8000", "foo:bar"])
def test_bad_specs(spec):
    with pytest.raises(UsageError):
        make_backend(spec)


def test_rollout_over_http_with_a_real_model_survives_noise(server):
    """A real (random) model's replies have no code: every turn is a format error fed back."""
    from davinci_kernel.config import RolloutConfig
    from davinci_kernel.records import EvalResult, Task
    from davinci_kernel.rollout import Context, GroupPlan, run_group

    class NoEval:
        def evaluate_many(self, items, progress=None):
            return [EvalResult(task=t.name, stage="compile", error_kind="syntax") for t, _ in items]

    task = Task(name="level1/19_ReLU", level=1, problem_id=19, source="import torch\n")
    backend = make_backend(f"openai:{server}#tiny-qwen3")
    ctx = Context(backend, NoEval(), RolloutConfig(max_new_tokens=16))
    g = asyncio.run(run_group(ctx, task, GroupPlan(k_schemes=0, n_rollouts=2, turns=2, summaries=False)))
    assert len(g.episodes) == 2
    for ep in g.episodes:
        t1, t2 = ep.turns
        assert t1.completion.token_ids and t1.completion.logprobs and t1.completion.error is None
        assert t1.reward == 0.0 and (t1.parse_error or t1.result is not None)
        assert t2.messages[-1]["role"] == "user" and "Result of turn 1 of 2" in t2.messages[-1]["content"]


def test_backend_survives_several_event_loops(server):
    backend = make_backend(f"openai:{server}#tiny-qwen3")
    for _ in range(2):  # the trainer calls asyncio.run once per step
        out = backend.generate_sync([GenRequest(_msgs("x"), max_new_tokens=4)] * 2)
        assert all(c.error is None for c in out)
