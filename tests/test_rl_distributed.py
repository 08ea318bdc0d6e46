"""Two processes (torch.distributed, gloo on CPU, through accelerate's Accelerator):
the replicas stay in sync, each rank writes its RNG state, and resume works."""

import json
import os
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


@pytest.mark.slow
def test_two_process_training_and_resume(tmp_path):
    res = _launch(tmp_path, 2)
    assert res.returncode == 0, res.stderr[-3000:]
    ms = read_metrics(tmp_path)
    assert [m["step"] for m in ms] == [1, 2]
    assert all(m["param_sync_spread"] == 0.0 for m in ms)  # DDP kept the replicas identical
    assert all(len(m["tasks"]) == 4 for m in ms)
    d = tmp_path / "checkpoints" / "step-2"
    assert json.loads((d / "trainer_state.json").read_text())["world_size"] == 2
    assert (d / "rng-rank0.pt").is_file() and (d / "rng-rank1.pt").is_file()
    res = _launch(tmp_path, 3, "--resume")
    assert res.returncode == 0, res.stderr[-3000:]
    assert [m["step"] for m in read_metrics(tmp_path)] == [1, 2, 3]
