"""One configuration surface: `--config FILE` and `SECTION.KEY=VALUE` overrides on every command
that evaluates, samples or trains; flags are shorthands for config fields; values are
type-checked without truncation; YAML errors carry a line and column; a `--resume` that
changes results is refused unless the change is named (real `dvk` processes, real files)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES
from conftest import run_dvk as dvk

from davinci_kernel.config import ConfigError, load_config, result_changes, to_dict

TINY = str(Path(__file__).parents[1] / "configs" / "tiny-cpu.yaml")
RELU, CAND = FIXTURES / "tasks" / "relu.py", FIXTURES / "legit" / "relu_triton.py"


def one_error_line(p) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout[-500:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, p.stderr
    return lines[0]


@pytest.mark.parametrize("override,fragment", [
    ("rl.steps=2.5", "rl.steps=2.5: expected an integer"),
    ("rl.steps=true", "expected an integer"),
    ("rl.lr=abc", "rl.lr='abc': expected a number"),
    ("rl.lr=yes", "rl.lr=True: expected a number"),
    ("rl.lr=.inf", "expected a finite number"),
    ("rl.model=[1, 2]", "expected text"),
    ("eval.trials=3.0", None),
    ("rl.steps=1_000", None),
])
def test_values_are_type_checked_without_truncation(override, fragment):
    if fragment is None:
        load_config(None, [override])
        return
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert fragment in str(e.value)


def test_train_rl_refuses_a_fractional_step_count(tmp_path):
    line = one_error_line(dvk(["train", "rl", "--config", TINY, "--out", tmp_path / "rl", "rl.steps=2.5"]))
    assert "rl.steps=2.5" in line and "expected an integer" in line
    assert not (tmp_path / "rl").exists()


def test_an_unknown_flag_is_a_flag_error_not_an_override(tmp_path):
    p = dvk(["train", "rl", "--config", TINY, "--out", tmp_path / "rl", "--ovrewrite"])
    assert p.returncode == 2 and "No such option: --ovrewrite" in p.stderr and "override" not in p.stderr


def test_yaml_errors_give_line_and_column(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rl:\n  steps: 2\n  lr: [1, 2\nsft:\n  epochs: 1\n")
    line = one_error_line(dvk(["bench", "--config", bad]))
    assert f"{bad}:4:4:" in line and "not valid YAML" in line
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+:\d+: not valid YAML"):
        load_config(bad)


def test_bench_takes_overrides_and_a_config_file(tmp_path):
    probs, cands = tmp_path / "problems" / "level1", tmp_path / "cands" / "level1"
    probs.mkdir(parents=True)
    cands.mkdir(parents=True)
    shutil.copy(RELU, probs / "1_ReLU.py")
    shutil.copy(CAND, cands / "1_ReLU.py")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("eval:\n  trials: 4\n  device: cpu\n")
    out = tmp_path / "run"
    base = ["bench", "--suite", f"kernelbench:{tmp_path / 'problems'}", "--candidates", tmp_path / "cands",
            "--workers", "1", "--no-compile", "--config", cfg]
    p = dvk([*base, "eval.sandbox=require", "eval.trials=2", "--out", out])
    assert p.returncode == 0, p.stderr[-2000:]
    row = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert row["trials"] == 2 and row["device"] == "cpu" and row["correct"] is True
    # a rerun into the same --out with a config that changes results is refused, naming the field
    again = [*base, "eval.sandbox=require", "eval.trials=3", "eval.cache_dir=" + str(tmp_path / "cache"), "--out", out]
    line = one_error_line(dvk(again))
    assert "eval.trials: 2 → 3" in line and "--allow-config-change eval.trials" in line and "cache_dir" not in line
    p = dvk([*again, "--allow-config-change", "eval.trials", "--json"])
    assert p.returncode == 0 and "resuming" in p.stderr, p.stderr[-2000:]
    # bad values, sections the command does not read, and a field set twice: one line, exit 2
    assert "allowed values are auto, require, off" in one_error_line(dvk([*base, "eval.sandbox=bogus"]))
    assert "reads only the eval section" in one_error_line(dvk([*base, "rl.lr=1"]))
    assert "given twice" in one_error_line(dvk([*base, "--device", "cpu", "eval.device=cuda"]))


def test_eval_flags_are_shorthands_for_config_fields(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("eval:\n  trials: 3\n")
    p = dvk(["eval", RELU, CAND, "--device", "cpu", "--config", cfg, "--json"])
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["trials"] == 3  # from the file
    p = dvk(["eval", RELU, CAND, "--device", "cpu", "--config", cfg, "--trials", "2", "--json"])
    assert json.loads(p.stdout)["trials"] == 2  # the flag wins over the file
    assert "eval.trials=0" in one_error_line(dvk(["eval", RELU, CAND, "eval.trials=0"]))


@pytest.mark.parametrize("cmd", [["optimize", RELU], ["run", "--suite", "builtin"]])
def test_optimize_and_run_take_overrides(cmd, tmp_path):
    base = [*cmd, "--model", "script:none.py", "--device", "cpu", "--out", tmp_path / "o"]
    assert "rollout.max_new_tokens=0: must be at least 1" in one_error_line(dvk([*base, "rollout.max_new_tokens=0"]))
    assert "reads only the eval, skills, rollout, reward sections" in one_error_line(dvk([*base, "rl.lr=1"]))
    assert "rollout.turns is given twice" in one_error_line(dvk([*base, "--turns", "2", "rollout.turns=3"]))
    assert not (tmp_path / "o").exists()


def test_result_changes_name_fields_and_ignore_where_things_go():
    from davinci_kernel.config import Config

    a, b = Config(), Config()
    b.rl.lr, b.out, b.rl.save_every, b.eval.cache_dir = 1e-5, "elsewhere", 5, "/tmp/c"
    assert result_changes(to_dict(a), to_dict(b)) == ["rl.lr: 1e-06 → 1e-05"]
    assert result_changes(to_dict(a), to_dict(b), allow=("rl.lr",)) == []
    a.rl.model, b.rl.model, b.rl.lr = "openai:http://a:8000/v1#qwen", "openai:http://b:9000/v1#qwen", a.rl.lr
    assert result_changes(to_dict(a), to_dict(b)) == []  # another server URL, the same model
    with pytest.raises(ConfigError, match="did you mean sft.lr"):
        result_changes(to_dict(a), to_dict(b), allow=("sft.lrr",))


def test_resume_with_a_changed_result_field_is_refused_unless_allowed(tmp_path):
    out = tmp_path / "rl"
    args = ["train", "rl", "--config", TINY, "--out", out, "rl.eval_every=0"]
    p = dvk([*args, "rl.steps=1"])
    assert p.returncode == 0, p.stderr[-2000:]
    line = one_error_line(dvk([*args, "rl.steps=2", "rl.lr=0.01", "--resume"]))
    assert "rl.lr: 0.003 → 0.01" in line and "--allow-config-change rl.lr" in line
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1  # nothing ran
    # where checkpoints go and how often they are kept change no results: no flag needed
    p = dvk([*args, "rl.steps=2", "rl.lr=0.01", "rl.keep_checkpoints=2", "--resume",
             "--allow-config-change", "rl.lr"])
    assert p.returncode == 0, p.stderr[-2000:]
    assert "rl.lr" in p.stderr and len((out / "metrics.jsonl").read_text().splitlines()) == 2
    assert json.loads((out / "config.json").read_text())["rl"]["lr"] == 0.01
