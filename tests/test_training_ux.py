"""Training as people expect from TRL: SFT checkpoints, --resume and --overwrite (a rerun never
trains over a model), report_to, a progress bar with an ETA, and --json on train, optimize
and run (real tiny models on the CPU, real `dvk` processes)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import RELU, relu_kernel, script_env, write_script, write_suite
from conftest import run_dvk as dvk

TINY = str(Path(__file__).parents[1] / "configs" / "tiny-cpu.yaml")


def _kernel(i: int) -> str:
    body = "\n".join(f"    v{k} = tl.load(x_ptr + offs + {k * (i + 1)}, mask=mask)" for k in range(4))
    return f"@triton.jit\ndef k{i}(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n{body}\n    tl.store(y_ptr + offs, v0)"


@pytest.fixture
def sft(tmp_path):
    data = tmp_path / "conv.jsonl"
    data.write_text("".join(json.dumps({"task": f"level1/{i}_t", "messages": [
        {"role": "user", "content": f"Write ModelNew {i}."},
        {"role": "assistant", "content": f"```python\n{_kernel(i)}\n```"}]}) + "\n" for i in range(4)))
    yaml = tmp_path / "sft.yaml"
    yaml.write_text(f"sft:\n  model: tiny\n  data: ['{data}']\n  lr: 0.01\n  epochs: 1\n  max_seq_len: 512\n"
                    "  batch_rows: 1\n  bf16: false\n  grad_checkpointing: false\n")
    return yaml, tmp_path / "sft"


def _sft(yaml, out, *more):
    env = dict(__import__("os").environ, OMP_NUM_THREADS="1")
    return dvk(["train", "sft", "--config", yaml, "--out", out, *more], env, timeout=600)


def test_sft_checkpoints_resume_and_never_trains_over_a_model(sft):
    yaml, out = sft
    p = _sft(yaml, out, "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)  # the one JSON document on stdout
    n = doc["steps"]  # optimizer steps of one epoch
    assert doc["epochs"] == 1 and n == doc["rows"] >= 1 and doc["model_dir"] == str(out / "model")
    assert (out / "checkpoints" / "step-1" / "COMPLETE").is_file()
    assert "eta" in p.stderr and f"{n}/{n}" in p.stderr  # the progress bar, printed once in a log
    weights = sorted((out / "model").glob("*.safetensors"))
    before = [w.read_bytes() for w in weights]

    p = _sft(yaml, out)  # a rerun never trains over the model
    assert p.returncode == 2 and "--resume" in p.stderr and "--overwrite" in p.stderr
    assert [w.read_bytes() for w in weights] == before

    p = _sft(yaml, out, "--resume")  # finished: nothing to do
    assert p.returncode == 0 and "is finished" in p.stderr, p.stderr[-2000:]

    p = _sft(yaml, out, "--resume", "sft.epochs=2")  # a second epoch on top of the first
    assert p.returncode == 0, p.stderr[-3000:]
    assert "resumed from" in p.stderr and "epoch 1" in p.stderr
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 2 * n + 1)) and {r["epoch"] for r in rows} == {0, 1}
    assert (out / "checkpoints" / "step-2" / "COMPLETE").is_file()

    p = _sft(yaml, out, "--resume", "sft.epochs=3", "sft.lr=0.5")  # a change of results is named
    assert p.returncode == 2 and "sft.lr: 0.01 → 0.5" in p.stderr and "--allow-config-change sft.lr" in p.stderr

    p = _sft(yaml, out, "--overwrite", "report_to=none")
    assert p.returncode == 0, p.stderr[-3000:]
    assert len((out / "metrics.jsonl").read_text().splitlines()) == n and not (out / "checkpoints" / "step-2").exists()
    assert not (out / "tb").exists()  # report_to=none: no tracker files


def test_report_to_is_a_declared_choice_checked_before_training(sft):
    yaml, out = sft
    p = _sft(yaml, out, "report_to=bogus")
    assert p.returncode == 2 and "report_to='bogus': allowed values are tensorboard, wandb, mlflow, none" in p.stderr
    for lib in ("wandb", "mlflow"):
        if importlib.util.find_spec(lib) is None:
            p = _sft(yaml, out, f"report_to={lib}")
            assert p.returncode == 2 and f"needs the {lib} package" in p.stderr
            assert len(p.stderr.strip().splitlines()) == 1 and not out.exists()
    if importlib.util.find_spec("tensorboard") is not None:
        p = _sft(yaml, out)  # the default: tensorboard
        assert p.returncode == 0, p.stderr[-2000:]
        assert any((out / "tb").iterdir())


def test_train_rl_json_and_progress(tmp_path):
    out = tmp_path / "rl"
    p = dvk(["train", "rl", "--config", TINY, "--out", out, "rl.eval_every=0", "rl.steps=1", "report_to=none",
             "--json"], timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["steps"] == 1 and doc["out"] == str(out) and "reward/policy" in doc["last"]
    assert "eta" in p.stderr and "1/1" in p.stderr and not (out / "tb").exists()


RESPOND = '''
def respond(request):
    return "Here:\\n```python\\n" + GOOD + "```"
'''


def test_optimize_and_run_json(tmp_path):
    write_suite(tmp_path, {"1_ReLU": RELU})
    script = write_script(tmp_path / "model.py", RESPOND, GOOD=relu_kernel())
    env = script_env(tmp_path / "calls.log")
    common = ["--model", f"script:{script}", "--skills", "off", "--turns", "1", "--device", "cpu", "--workers", "1",
              "--json"]
    p = dvk(["optimize", tmp_path / "suite" / "level1" / "1_ReLU.py", *common, "--rollouts", "1",
             "--out", tmp_path / "o"], env)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["best"]["correct"] is True and doc["best_code"] == str(tmp_path / "o" / "best.py")
    assert doc["where"] == {"scheme": 0, "rollout": 0, "turn": 0} and doc["rollouts"][0]["turns"] == ["ok (untimed)"]
    p = dvk(["run", "--suite", f"kernelbench:{tmp_path / 'suite'}", *common, "--out", tmp_path / "r"], env)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["done"] == 1 and doc["fast_p"]["last"]["1"]["fast_0"] == 1.0
