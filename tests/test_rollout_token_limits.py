"""Per-role generation limits (rollout.max_new_tokens_selection / _summary / _policy): the
config, the limit each role's requests carry through the trainer's entry point
(``collect_groups``) and the synthetic environment, and every generator backend honouring
the limit of each request in one mixed batch (in-process, generation server, OpenAI)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from davinci_kernel.config import ConfigError, RolloutConfig, help_table, load_config
from davinci_kernel.llm.base import GenRequest

ROOT = Path(__file__).resolve().parents[1]
LIMITS = ["rollout.max_new_tokens=512", "rollout.max_new_tokens_selection=64",
          "rollout.max_new_tokens_summary=96", "rollout.max_new_tokens_policy=128"]
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_role_without_its_own_limit_uses_max_new_tokens():
    r = RolloutConfig(max_new_tokens=300)
    assert [r.max_new_tokens_for(x) for x in ("select", "summary", "policy")] == [300, 300, 300]
    r = load_config(None, LIMITS).rollout
    assert [r.max_new_tokens_for(x) for x in ("select", "summary", "policy")] == [64, 96, 128]
    r = load_config(None, ["rollout.max_new_tokens=512", "rollout.max_new_tokens_summary=7"]).rollout
    assert [r.max_new_tokens_for(x) for x in ("select", "summary", "policy")] == [512, 7, 512]


@pytest.mark.parametrize("role", ["selection", "summary", "policy"])
def test_a_negative_limit_is_one_line(role):
    with pytest.raises(ConfigError, match=rf"^rollout.max_new_tokens_{role}=-1: must be 0 \(use "
                                          r"rollout.max_new_tokens\) or more$"):
        load_config(None, [f"rollout.max_new_tokens_{role}=-1"])


@pytest.mark.parametrize("recipe", ["qwen3-8b.yaml", "qwen3-14b.yaml"])
def test_the_recipes_use_the_releases_limits(recipe):
    r = load_config(ROOT / "configs" / recipe).rollout
    # the release: selection 1024, summary 2048, policy response 8192
    assert (r.max_new_tokens_for("select"), r.max_new_tokens_for("summary"), r.max_new_tokens_for("policy")) == (
        1024, 2048, 8192)
    helps = {k: h for k, _, h in help_table() if k.startswith("rollout.max_new_tokens_")}
    assert len(helps) == 3 and all(h.startswith("[R]") and "0 = rollout.max_new_tokens" in h for h in helps.values())
    assert [f"{n} in the release" in helps[f"rollout.max_new_tokens_{k}"]
            for k, n in (("selection", 1024), ("summary", 2048), ("policy", 8192))] == [True] * 3


def _role(req) -> str:
    system = req.messages[0]["content"]
    if "You pick optimization skills" in system:
        return "select"
    if "You curate a library" in system:
        return "summary"
    return "verify" if req.temperature == 0 else "policy"


def test_collect_groups_sends_each_role_its_limit(tmp_path):
    """The trainer's entry point (rl.env=rollout): a task group with selection, three policy
    turns, summaries and greedy verification; each request carries its role's limit (a
    verification re-generation is a policy turn)."""
    from test_rollout_group import TASK, FakeEvaluator, respond

    from davinci_kernel.llm.scripted import ScriptedBackend
    from davinci_kernel.records import Skill
    from davinci_kernel.rollout.training import collect_groups
    from davinci_kernel.skills.admit import Admission
    from davinci_kernel.skills.store import SkillStore

    cfg = load_config(None, LIMITS + ["rollout.k_schemes=2", "rollout.n_rollouts=2", "rollout.s_summaries=2",
                                      f"skills.db={tmp_path / 'lib.db'}"])
    store = SkillStore(tmp_path / "lib.db")
    store.add(Skill(name="mask_tails", description="Mask loads at the tail", tags=["elementwise", "relu"],
                    content="## Motivation\nrelu\n## Key Idea\nmask\n## Example\n```python\nm = offs < n\n```\n"),
              step=0)
    backend = ScriptedBackend(respond)
    (g,) = collect_groups([TASK], backend, store, FakeEvaluator(), Admission(), cfg, step=1)
    store.close()
    assert g.summaries and g.verifications  # every role ran
    seen: dict[str, set[int]] = {}
    for req in backend.calls:
        seen.setdefault(_role(req), set()).add(req.max_new_tokens)
    assert seen == {"select": {64}, "policy": {128}, "summary": {96}, "verify": {128}}


def test_the_synthetic_environment_gives_each_role_its_limit(tmp_path):
    """rl.env=synthetic samples without stopping at EOS: each completion is its role's limit long."""
    from davinci_kernel.llm.tiny import build_tiny
    from davinci_kernel.rl.local_gen import LocalGenerator
    from davinci_kernel.rl.modeling import load_model, load_tokenizer
    from davinci_kernel.rl.synthetic import SyntheticEnv

    cfg = load_config(ROOT / "configs" / "tiny-cpu.yaml", ["rollout.max_new_tokens_selection=3",
                                                            "rollout.max_new_tokens_summary=5",
                                                            "rollout.max_new_tokens_policy=7"])
    path = build_tiny(tmp_path / "m")
    gen = LocalGenerator(load_model(path, bf16=False, grad_checkpointing=False), load_tokenizer(path))
    env = SyntheticEnv(cfg, policy_gain=6.0)  # large swings between turns: summaries fire
    torch.manual_seed(0)
    groups = env.collect(env.train_tasks()[:4], gen, step=1)
    lengths: dict[str, set[int]] = {}
    for g in groups:
        for t in g.selections + [t for e in g.episodes for t in e.turns] + g.summaries:
            lengths.setdefault(t.role, set()).add(len(t.completion.token_ids))
    assert lengths == {"select": {3}, "policy": {7}, "summary": {5}}


def _mixed() -> list[GenRequest]:
    msgs = [{"role": "user", "content": "write a relu kernel"}]
    return [GenRequest(msgs, temperature=1.0, max_new_tokens=n, seed=i) for i, n in enumerate((3, 9, 3, 5))]


def test_the_in_process_backend_stops_each_request_at_its_limit(tmp_path):
    from davinci_kernel.llm.tiny import build_tiny
    from davinci_kernel.rl.local_gen import LocalBackend
    from davinci_kernel.rl.modeling import load_model, load_tokenizer

    path = build_tiny(tmp_path / "m")
    b = LocalBackend(load_model(path, bf16=False, grad_checkpointing=False), load_tokenizer(path), max_batch=8)
    b._gen.eos = set()  # no early stop: each completion runs to its limit
    out = b.generate_sync(_mixed())
    assert [len(c.token_ids) for c in out] == [3, 9, 3, 5]
    assert all(c.finish_reason == "length" and len(c.logprobs) == len(c.token_ids) for c in out)


class _Recorder(BaseHTTPRequestHandler):
    seen: list = []
    answer = None

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.seen.append((self.path, body))
        data = json.dumps(type(self).answer(body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def recorder():
    handler = type("H", (_Recorder,), {"seen": []})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield handler, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_the_generation_server_backend_sends_each_request_its_limit(recorder):
    """rl.generator=vllm: one /v1/completions request per limit, with that limit as max_tokens."""
    from davinci_kernel.llm.server_client import ServerClient
    from davinci_kernel.llm.tiny import train_tokenizer
    from davinci_kernel.rl.server_gen import ServerGenerator

    h, url = recorder
    h.answer = staticmethod(lambda b: {"choices": [
        {"index": i, "token_ids": [5] * b["max_tokens"], "finish_reason": "length",
         "logprobs": {"token_logprobs": [-1.0] * b["max_tokens"]}} for i in range(len(b["prompt"]))]})
    backend = ServerGenerator(ServerClient("vllm", url, "m"), train_tokenizer()).backend(max_batch=8)
    out = backend.generate_sync(_mixed())
    assert [len(c.token_ids) for c in out] == [3, 9, 3, 5]
    assert sorted((b["max_tokens"], len(b["prompt"])) for _, b in h.seen) == [(3, 2), (5, 1), (9, 1)]


def test_the_openai_backend_sends_each_request_its_limit(recorder):
    from davinci_kernel.llm.openai_backend import OpenAIBackend

    h, url = recorder
    h.answer = staticmethod(lambda b: {
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "length",
                     "message": {"role": "assistant", "content": "y" * b["max_tokens"]}}]})
    out = OpenAIBackend(f"{url}/v1", "m", token_ids="off", logprobs=False).generate_sync(_mixed())
    assert [len(c.text) for c in out] == [3, 9, 3, 5]
    assert sorted(b["max_tokens"] for _, b in h.seen) == [3, 3, 5, 9]
