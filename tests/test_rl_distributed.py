"""Two processes (torch.distributed, gloo on CPU, through accelerate's Accelerator):
the replicas stay in sync, each rank writes its RNG state, and resume works."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from davinci_kernel.rl.metrics_log import read_metrics

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "tiny-cpu.yaml")


def _launch(out, steps, *extra):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "davinci_kernel.cli", "train", "rl", "--config", CONFIG, "--out", str(out),
           f"rl.steps={steps}", "rl.eval_every=0", *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The runs both tests start from, each launched once: two DDP steps (and a copy of that
    run as it stands after step 2, for the test that resumes it under FSDP), two FSDP steps,
    and three uninterrupted DDP steps."""
    tmp = tmp_path_factory.mktemp("dist")
    out = {"ddp": tmp / "ddp", "fsdp": tmp / "fsdp", "straight": tmp / "straight"}
    for name, steps, extra in (("ddp", 2, []), ("fsdp", 2, ["rl.fsdp=true"]), ("straight", 3, [])):
        res = _launch(out[name], steps, *extra)
        assert res.returncode == 0, (name, res.stderr[-3000:])
    out["ddp_for_fsdp"] = tmp / "ddp-for-fsdp"
    shutil.copytree(out["ddp"], out["ddp_for_fsdp"])
    return out


@pytest.mark.slow
def test_two_process_training_and_resume(runs):
    run = runs["ddp"]
    ms = read_metrics(run)
    assert [m["step"] for m in ms] == [1, 2]
    assert all(m["param_sync_spread"] == 0.0 for m in ms)  # DDP kept the replicas identical
    assert all(len(m["tasks"]) == 4 for m in ms)
    d = run / "checkpoints" / "step-2"
    assert json.loads((d / "trainer_state.json").read_text())["world_size"] == 2
    assert (d / "rng-rank0.pt").is_file() and (d / "rng-rank1.pt").is_file()
    res = _launch(run, 3, "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    assert [m["step"] for m in read_metrics(run)] == [1, 2, 3]


def _weights(run, step):
    from safetensors.torch import load_file

    return load_file(str(run / "checkpoints" / f"step-{step}" / "model" / "model.safetensors"))


def _max_diff(a, b):
    assert set(a) == set(b)
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.slow
def test_fsdp_matches_ddp_and_resumes_across_both(runs):
    """rl.fsdp shards weights, gradients and AdamW state over two processes: the same two
    steps as DDP give the same weights, and checkpoints of either kind resume under the
    other, landing where an uninterrupted run lands."""
    fsdp, ddp, straight = runs["fsdp"], runs["ddp_for_fsdp"], runs["straight"]
    assert _max_diff(_weights(fsdp, 2), _weights(ddp, 2)) < 1e-5
    assert [m["reward/policy"] for m in read_metrics(fsdp)] == [m["reward/policy"] for m in read_metrics(ddp)]
    assert all("param_sync_spread" not in m for m in read_metrics(fsdp))  # shards differ by design
    d = fsdp / "checkpoints" / "step-2"
    state = json.loads((d / "trainer_state.json").read_text())
    assert state["fsdp"] is True and state["optimizer_format"] == "names"
    assert json.loads((d / "model" / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]
    # the FSDP run resumes without sharding, the DDP run with it
    for out, extra in ((fsdp, []), (ddp, ["rl.fsdp=true"])):
        res = _launch(out, 3, "--resume", *extra)
        assert res.returncode == 0, res.stderr[-3000:]
        assert [m["step"] for m in read_metrics(out)] == [1, 2, 3]
        assert _max_diff(_weights(out, 3), _weights(straight, 3)) < 1e-5


@pytest.mark.gpu
def test_fsdp_on_two_gpus_trains_and_resumes(tmp_path):
    """The same sharded run on two GPUs (NCCL, bf16 compute): two steps, then a resume."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    res = _launch(tmp_path, 2, "rl.fsdp=true", "rl.bf16=true")
    assert res.returncode == 0, res.stderr[-3000:]
    res = _launch(tmp_path, 3, "--resume", "rl.fsdp=true", "rl.bf16=true")
    assert res.returncode == 0, res.stderr[-3000:]
    assert [m["step"] for m in read_metrics(tmp_path)] == [1, 2, 3]
