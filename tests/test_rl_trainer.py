"""Trainer: run layout, kill -9 then --resume with the same task order and results,
broken checkpoints skipped with a warning, config errors before any model is loaded."""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from davinci_kernel.config import load_config
from davinci_kernel.rl import checkpoint as ckpt
from davinci_kernel.rl.data import TaskSampler
from davinci_kernel.rl.metrics_log import read_metrics
from davinci_kernel.rl.synthetic import SyntheticEnv
from davinci_kernel.rl.trainer import RLTrainer

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "tiny-cpu.yaml")
VOLATILE = ("_s", "tokens_per_s", "saved_at")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def _stable(m):
    return {k: v for k, v in m.items() if not k.endswith(VOLATILE) and k != "tasks"}


def test_run_layout_and_metrics(tmp_path):
    cfg = load_config(CONFIG, ["rl.steps=2", "rl.eval_every=2"])
    RLTrainer(cfg, out=tmp_path).run()
    ms = read_metrics(tmp_path)
    assert [m["step"] for m in ms] == [1, 2]
    assert "val/L1/fast_1" in ms[1] and "loss/policy" in ms[0] and "adv_abs/select" in ms[0]
    for step in (1, 2):
        d = tmp_path / "checkpoints" / f"step-{step}"
        assert ckpt.check(d) is None
        state = json.loads((d / "trainer_state.json").read_text())
        assert state["cursor"] == step * cfg.rl.batch_tasks and "skills" in state
        assert (d / "model" / "config.json").is_file() and (d / "optimizer.pt").is_file()
        assert (d / "rng-rank0.pt").is_file()
    assert any((tmp_path / "tb").iterdir())
    run = json.loads((tmp_path / "run.json").read_text())  # what the run ran on
    assert run["kind"] == "train rl" and run["provenance"]["python"] and "gpu_count" in run["provenance"]


def test_a_control_run_at_lr_0_samples_and_scores_but_never_moves_the_weights(tmp_path):
    """rl.lr=0: the control arm of a learning run. Steps run and log their rewards (and the
    Fast_p of the sampled kernels); the weights stay bit for bit what they were."""
    import torch

    cfg = load_config(CONFIG, ["rl.steps=2", "rl.eval_every=0", "rl.lr=0"])
    t = RLTrainer(cfg, out=tmp_path)
    before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    t.run()
    ms = read_metrics(tmp_path)
    assert [m["step"] for m in ms] == [1, 2] and all("fast_1.5/policy" in m and m["lr"] == 0 for m in ms)
    assert any(m["samples"] > 0 for m in ms)  # there was something to update with
    assert all(torch.equal(before[n], p) for n, p in t.model.named_parameters())


@pytest.mark.slow
def test_kill9_then_resume_matches_uninterrupted(tmp_path):
    steps = 5
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "davinci_kernel.cli", "train", "rl", "--config", CONFIG, "--out", str(killed),
           f"rl.steps={steps}", "rl.eval_every=0"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    marker = killed / "checkpoints" / "step-2" / ckpt.MARKER
    deadline = time.time() + 150
    while not marker.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), proc.stderr.read().decode()[-2000:] if proc.poll() is not None else "timeout"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    res = subprocess.run(cmd + ["--resume"], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=200)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "resumed from" in res.stderr
    resumed = read_metrics(killed)
    assert [m["step"] for m in resumed] == list(range(1, steps + 1))

    cfg = load_config(CONFIG, [f"rl.steps={steps}", "rl.eval_every=0"])
    RLTrainer(cfg, out=tmp_path / "straight").run()
    straight = read_metrics(tmp_path / "straight")
    sampler = TaskSampler(SyntheticEnv(cfg).train_tasks(), cfg.rl.batch_tasks, cfg.rl.seed)
    for a, b in zip(resumed, straight):
        assert a["tasks"] == b["tasks"] == [t.name for t in sampler.batch_for(a["step"])]
        assert _stable(a) == pytest.approx(_stable(b), rel=1e-5, abs=1e-6), a["step"]
    assert ckpt.latest_complete(killed / "checkpoints")[0] == steps


def test_broken_checkpoints_are_skipped(tmp_path, caplog):
    cfg = load_config(CONFIG, ["rl.steps=3", "rl.eval_every=0"])
    RLTrainer(cfg, out=tmp_path).run()
    root = tmp_path / "checkpoints"
    (root / "step-3" / "optimizer.pt").write_bytes(b"truncated")  # size no longer matches
    partial = root / "step-4"
    partial.mkdir()
    (partial / "trainer_state.json").write_text("{}")  # no COMPLETE marker
    with caplog.at_level(logging.WARNING):
        found = ckpt.latest_complete(root)
    assert found[0] == 2
    assert "step-4" in caplog.text and "step-3" in caplog.text
    cfg5 = load_config(CONFIG, ["rl.steps=3", "rl.eval_every=0"])
    with caplog.at_level(logging.WARNING):
        t = RLTrainer(cfg5, out=tmp_path, resume=True)
    assert t.start_step == 2
    assert [m["step"] for m in read_metrics(tmp_path)] == [1, 2]


def test_unloadable_checkpoint_falls_back(tmp_path, caplog):
    cfg = load_config(CONFIG, ["rl.steps=2", "rl.eval_every=0"])
    RLTrainer(cfg, out=tmp_path).run()
    d = tmp_path / "checkpoints" / "step-2"
    opt = d / "optimizer.pt"
    opt.write_bytes(b"x" * opt.stat().st_size)  # same size, garbage content
    with caplog.at_level(logging.WARNING):
        t = RLTrainer(cfg, out=tmp_path, resume=True)
    assert t.start_step == 1
    assert "could not be loaded" in caplog.text


def test_atomic_seal_replaces_and_prunes(tmp_path):
    for step in (1, 2, 3):
        tmp = ckpt.tmp_dir(tmp_path, step)
        tmp.mkdir()
        (tmp / "a.bin").write_bytes(b"1" * step)
        ckpt.seal(tmp, ckpt.step_dir(tmp_path, step))
    ckpt.tmp_dir(tmp_path, 4).mkdir()  # a write killed before sealing
    ckpt.cleanup_tmp(tmp_path)
    ckpt.prune(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-2", "step-3"]


@pytest.mark.parametrize("override,needle", [
    ("rl.group_by=episode", "rl.group_by='episode': allowed values are task, scheme"),
    ("rl.lr=-1", "rl.lr=-1.0: must be 0 or more"),
    ("rl.minibatches=zero", "rl.minibatches='zero': expected an integer"),
    ("reward.kind=speed", "reward.kind='speed': allowed values are released, tiered, fastp"),
    ("rl.nope=1", "unknown config key 'rl.nope'"),
    ("eval.timing_flush=memset", "eval.timing_flush='memset': allowed values are hold, fill"),
])
def test_config_errors_exit_2_before_loading(override, needle, capsys, tmp_path):
    from davinci_kernel.cli import main

    with pytest.raises(SystemExit) as e:
        main(["train", "rl", "--config", CONFIG, "--out", str(tmp_path), override])
    assert e.value.code == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "checkpoints").exists()  # nothing was set up


@pytest.mark.parametrize("other,needle", [
    ("rl.lora_r=8", "rl.fsdp=True: must be false with rl.lora_r > 0"),
    ("rl.logprob_impl=fused", "rl.fsdp=True: must be false with rl.logprob_impl=fused"),
])
def test_fsdp_conflicts_exit_2(other, needle, capsys, tmp_path):
    from davinci_kernel.cli import main

    with pytest.raises(SystemExit) as e:
        main(["train", "rl", "--config", CONFIG, "--out", str(tmp_path), "rl.fsdp=true", other])
    assert e.value.code == 2
    assert needle in capsys.readouterr().err


def test_bad_model_spec_exit_2(capsys, tmp_path):
    from davinci_kernel.cli import main

    with pytest.raises(SystemExit) as e:
        main(["train", "rl", "--config", CONFIG, "--out", str(tmp_path), "rl.model=tiny:depth=3"])
    assert e.value.code == 2
    assert "depth=3" in capsys.readouterr().err


def test_lora_training_checkpoints_adapter_and_resumes(tmp_path):
    cfg = load_config(CONFIG, ["rl.steps=1", "rl.eval_every=0", "rl.lora_r=4", "rl.lr=0.01"])
    RLTrainer(cfg, out=tmp_path).run()
    d = tmp_path / "checkpoints" / "step-1" / "model"
    assert (d / "adapter_config.json").is_file() and not (d / "model.safetensors").exists()
    cfg2 = load_config(CONFIG, ["rl.steps=2", "rl.eval_every=0", "rl.lora_r=4", "rl.lr=0.01"])
    t = RLTrainer(cfg2, out=tmp_path, resume=True)
    assert t.start_step == 1
    trainable = [n for n, p in t.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    t.run()
    assert [m["step"] for m in read_metrics(tmp_path)] == [1, 2]


def test_one_step_on_the_real_pipeline(tmp_path, monkeypatch):
    """rl.env=rollout: the trainer's own model samples through the transformers backend
    (sized by rollout.gen_batch), the CPU evaluator checks what it wrote, and the step
    logs, checkpoints and keeps the skill library."""
    import davinci_kernel.llm.hf_backend as hf_backend

    made = []
    real = hf_backend.HFBackend.__init__

    def spy(self, *a, **kw):
        real(self, *a, **kw)
        made.append(self)

    monkeypatch.setattr(hf_backend.HFBackend, "__init__", spy)
    cfg = load_config(CONFIG, ["rl.env=rollout", "rl.steps=1", "rl.batch_tasks=1", "rl.eval_every=0",
                               "rollout.k_schemes=1", "rollout.n_rollouts=2", "rollout.turns=1",
                               "rollout.gen_batch=3", f"eval.cache_dir={tmp_path / 'cache'}"])
    RLTrainer(cfg, out=tmp_path).run()
    (m,) = read_metrics(tmp_path)
    assert m["step"] == 1 and m["gen_tokens"] > 0 and "reward/policy" in m
    assert 0 < m["sample_s"] < m["gen_s"]  # sampling, then the evaluator's share of the step
    assert made and all(b.max_batch == 3 and b.autocast is None for b in made)  # bf16 off: no autocast
    assert ckpt.check(tmp_path / "checkpoints" / "step-1") is None


def test_failed_model_calls_are_counted_and_warned(caplog):
    """A sampler that fails (out of memory, say) shows as gen_errors in the step's metrics
    and one warning with the first reason, not only as zero rewards."""
    import logging

    from davinci_kernel.records import Completion, Episode, TaskGroup, Turn
    from davinci_kernel.rl.trainer import RLTrainer, _warn_gen_errors

    ok = Completion(text="x", token_ids=[1, 2, 3], logprobs=[0.0] * 3)
    bad = Completion(text="", finish_reason="error", error="generation failed: out of memory: 3.5 GiB")
    g = TaskGroup(task="t", selections=[Turn("select", "t", completion=ok)],
                  episodes=[Episode("t", 0, 0, turns=[Turn("policy", "t", completion=bad),
                                                      Turn("policy", "t", completion=bad, turn=1)])])
    sums = RLTrainer._group_sums(None, [g])
    assert sums["gen_errors"] == (2.0, 0.0) and sums["gen_tokens"] == (3.0, 0.0)
    with caplog.at_level(logging.WARNING, logger="davinci_kernel.rl"):
        _warn_gen_errors([g], 7)
    assert "step 7: 2 model call(s) failed; first: generation failed: out of memory" in caplog.text


def test_rollout_env_keeps_the_batch_size_that_fit(tmp_path):
    """After a step's sampler had to halve its batches (out of memory), the next step's
    sampler starts at the size that fit instead of failing at the configured one again."""
    from types import SimpleNamespace

    from davinci_kernel.llm.tiny import build_tiny
    from davinci_kernel.rl.env import RolloutEnv
    from davinci_kernel.rl.local_gen import LocalGenerator
    from davinci_kernel.rl.modeling import load_model, load_tokenizer

    cfg = load_config(CONFIG, ["rl.env=rollout", "rollout.gen_batch=64", f"eval.cache_dir={tmp_path / 'cache'}",
                               f"skills.db={tmp_path / 'skills.db'}"])
    env = RolloutEnv(cfg, tmp_path)
    path = build_tiny(tmp_path / "m")
    gen = LocalGenerator(load_model(path, bf16=False, grad_checkpointing=False), load_tokenizer(path))
    assert env._backend(gen).max_batch == 64
    env._last_backend = SimpleNamespace(max_batch=16)  # what the last step's halving left
    assert env._backend(gen).max_batch == 16
