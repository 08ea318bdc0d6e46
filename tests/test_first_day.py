"""A user's first day, round two (issue 43), one test per row: nothing half-made is left in
a run folder, failures are said out loud, `-` is stdout for a file and never a folder, and
the smaller rows (real `dvk` processes, real files, a real local HTTP server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import RELU, write_suite
from conftest import run_dvk as dvk

TINY = str(Path(__file__).parents[1] / "configs" / "tiny-cpu.yaml")


# --------------------------------------------------------------------------- nothing half-made
def _conversations(path: Path) -> Path:
    path.write_text("".join(json.dumps({"task": f"level1/{i}_t", "messages": [
        {"role": "user", "content": f"Write ModelNew {i}."},
        {"role": "assistant", "content": "```python\nx = 1\n```"}]}) + "\n" for i in range(2)))
    return path


def test_train_sft_without_a_model_makes_no_folder_and_a_leftover_folder_counts_as_empty(tmp_path):
    from davinci_kernel.rl.commands import prepare_sft_out

    data = _conversations(tmp_path / "conv.jsonl")
    out = tmp_path / "sft"
    p = dvk(["train", "sft", "--config", TINY, "--out", out, f"sft.data=[{data}]"], timeout=60)
    assert p.returncode == 2 and "no model given: set sft.model" in p.stderr and "Traceback" not in p.stderr
    assert not out.exists()  # checked before the folder is made
    p = dvk(["train", "sft", "--config", TINY, "--out", out, "sft.model=tiny", f"sft.data=[{tmp_path / 'nope'}]"],
            timeout=60)
    assert p.returncode == 2 and "sft.data" in p.stderr and not out.exists()
    # what an earlier start that failed before its first step left: run.json, config.json, checkpoints/
    out.mkdir()
    (out / "run.json").write_text('{"kind": "train sft", "sft_model": ""}')
    (out / "config.json").write_text(json.dumps({"sft": {"model": ""}}))
    (out / "checkpoints").mkdir()
    for resume in (False, True):  # the corrected rerun and its --resume both start as new
        assert prepare_sft_out(out, resume, False, 1) is None
        assert not (out / "config.json").exists() and not (out / "run.json").exists()


def test_train_rl_with_a_missing_model_folder_leaves_nothing(tmp_path):
    out = tmp_path / "rl"
    p = dvk(["train", "rl", "--config", TINY, "--out", out, "rl.model=hf:/nonexist"], timeout=60)
    assert p.returncode == 2 and "/nonexist not found" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not out.exists()  # no checkpoints/, no .dvk.lock
    out.mkdir()  # a folder that an older start left with its empty checkpoints/ and lock
    (out / "checkpoints").mkdir()
    (out / ".dvk.lock").write_text("")
    from davinci_kernel.rl.commands import prepare_rl_out

    assert prepare_rl_out(out, False, False, 1) is None and not (out / "checkpoints").exists()


def test_a_run_folder_with_no_complete_step_counts_as_empty(tmp_path):
    from davinci_kernel.rundir import RunDir, only_setup
    from davinci_kernel.suite.bench import _open_run_dir

    out = tmp_path / "o"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"kind": "optimize", "model": "script:old.py", "turns": 3}))
    (out / "groups.jsonl").write_text("")
    assert only_setup(out)
    meta = RunDir(out).start({"kind": "optimize", "model": "script:new.py", "turns": 1})  # no refusal
    assert meta["model"] == "script:new.py" and "resumed" not in meta
    b = tmp_path / "b"
    b.mkdir()
    (b / "run.json").write_text(json.dumps({"kind": "bench", "suite": "builtin", "candidates": "reference"}))
    meta = _open_run_dir(b, {"kind": "bench", "suite": "kernelbench:x", "candidates": "reference", "config": {}})
    assert meta["suite"] == "kernelbench:x"
    (out / "results.jsonl").write_text('{"task": "t"}\n')  # a complete step: now it is a run
    assert not only_setup(out)


@pytest.mark.parametrize("args,fragment", [
    (["bench", "--suite", "kernelbench:no_such_dir"], "no_such_dir"),
    (["optimize", str(Path(__file__).parent / "fixtures" / "tasks" / "relu.py"), "--model", "script:no_such.py"],
     "script:no_such.py: file not found"),
    (["run", "--model", "hf:no_such_model"], "no_such_model not found"),
    (["report", "no_such_a", "no_such_b"], "no_such_a"),
])
def test_every_command_that_writes_a_run_folder_checks_its_inputs_first(args, fragment, tmp_path):
    out = tmp_path / "new" / "out"
    p = dvk([*args, "--out", out], timeout=60, cwd=tmp_path)
    assert p.returncode == 2 and fragment in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not (tmp_path / "new").exists()


# --------------------------------------------------------------------------- failures said out loud
_TOO_LONG = "This model's maximum context length is 4096 tokens. However, you requested 9000 tokens."


@pytest.fixture
def server_400():
    """A real HTTP server on 127.0.0.1 that lists one model and answers every completion with
    HTTP 400 (a context too small for the prompt)."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def _send(self, code: int, doc: dict) -> None:
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802
            self._send(200, {"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 4096}]})

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._send(400, {"error": {"message": _TOO_LONG, "type": "BadRequestError", "code": 400}})

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"openai:http://127.0.0.1:{srv.server_address[1]}/v1#m"
    srv.shutdown()


def test_optimize_and_run_against_a_server_that_answers_400_exit_3(tmp_path, server_400):
    write_suite(tmp_path, {"1_ReLU": RELU})
    common = ["--model", server_400, "--skills", "off", "--turns", "1", "--device", "cpu", "--workers", "1"]
    p = dvk(["optimize", tmp_path / "suite" / "level1" / "1_ReLU.py", *common, "--rollouts", "1",
             "--out", tmp_path / "o"], timeout=120)
    assert p.returncode == 3, p.stderr[-2000:]
    assert "1 of 1 model calls failed" in p.stderr and "HTTP 400" in p.stderr and "maximum context length" in p.stderr
    assert "Traceback" not in p.stderr
    p = dvk(["run", "--suite", f"kernelbench:{tmp_path / 'suite'}", *common, "--out", tmp_path / "r", "--json"],
            timeout=120)
    assert p.returncode == 3, p.stderr[-2000:]
    assert json.loads(p.stdout)["failed_calls"] == 1 and "maximum context length" in p.stderr
    assert not (tmp_path / "r" / "results.jsonl").exists()  # no result: a rerun redoes the task


def test_sigterm_says_what_was_saved_as_ctrl_c_does(tmp_path):
    """`timeout -s TERM dvk bench …`: the signal arrives while the evaluator starts (a real
    SIGTERM to the real process); the command says what was saved and exits 143."""
    import subprocess
    import sys

    probs = tmp_path / "problems" / "level1"
    probs.mkdir(parents=True)
    (probs / "1_ReLU.py").write_text(RELU)
    out = tmp_path / "run"
    code = ("import os, signal, sys\n"
            "from davinci_kernel.suite import bench\n"
            "bench._make_evaluator = lambda *a, **k: os.kill(os.getpid(), signal.SIGTERM) or __import__('time')"
            ".sleep(5)\n"
            "from davinci_kernel import cli\n"
            "cli.main(sys.argv[1:])\n")
    p = subprocess.run([sys.executable, "-c", code, "bench", "--suite", f"kernelbench:{tmp_path / 'problems'}",
                        "--candidates", "self", "--device", "cpu", "--workers", "1", "--out", str(out)],
                       capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 143, p.stderr[-2000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("terminated (SIGTERM): nothing was saved") and "Traceback" not in p.stderr
    assert not out.exists()


def test_a_broken_problem_in_a_suite_is_the_problems_and_a_resume_keeps_the_recorded_device(tmp_path):
    import shutil

    from conftest import FIXTURES

    probs, cands = tmp_path / "problems" / "level1", tmp_path / "cands" / "level1"
    probs.mkdir(parents=True)
    cands.mkdir(parents=True)
    shutil.copy(FIXTURES / "tasks" / "relu.py", probs / "1_ReLU.py")
    (probs / "2_Broken.py").write_text(RELU.replace("    return [torch.randn(batch_size, dim)]",
                                                    "    raise ValueError('no inputs today')"))
    for name in ("1_ReLU", "2_Broken"):
        shutil.copy(FIXTURES / "legit" / "relu_triton.py", cands / f"{name}.py")
    out = tmp_path / "b"
    args = ["bench", "--suite", f"kernelbench:{tmp_path / 'problems'}", "--candidates", tmp_path / "cands",
            "--workers", "1", "--no-compile", "--out", out, "--json"]
    p = dvk(args, timeout=300)  # --device auto: the evaluator's device is recorded (cpu here)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    device = json.loads((out / "run.json").read_text())["device"]
    assert device != "auto"
    assert [b["task"] for b in doc["broken_problems"]] == ["level1/2_Broken"]
    assert "no inputs today" in doc["broken_problems"][0]["error"]
    assert doc["fast_p"]["1"]["n"] == 1 and doc["fast_p"]["1"]["fast_0"] == 1.0  # the broken one is not counted
    p = dvk(args, timeout=120)  # resumed: nothing to evaluate, the recorded device stays
    assert p.returncode == 0, p.stderr[-2000:]
    meta = json.loads((out / "run.json").read_text())
    assert meta["device"] == device and meta["resumed"] == 1
    p = dvk(args[:-1], timeout=120)  # the table names it too
    assert "broken problem (not counted in Fast_p): level1/2_Broken" in p.stdout.replace("\n", " ")
    p = dvk(["report", out, "--json"], timeout=120)  # and so does the run's report
    assert p.returncode == 0 and json.loads(p.stdout)["fastp"][""]["1"]["n"] == 1
    assert "broken problem (not counted in Fast_p): level1/2_Broken" in json.loads(p.stdout)["notes"]


# --------------------------------------------------------------------------- `-` and --out
@pytest.mark.parametrize("args", [
    ["bench", "--out", "-"],
    ["report", "a", "b", "--out", "-"],
    ["train", "rl", "--config", TINY, "--out", "-"],
    ["optimize", str(Path(__file__).parent / "fixtures" / "tasks" / "relu.py"), "--model", "script:x.py", "--out", "-"],
])
def test_a_folder_is_never_stdout(args, tmp_path):
    p = dvk(args, timeout=60, cwd=tmp_path)
    assert p.returncode == 2, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--out -: this command writes a folder" in lines[0]
    assert not (tmp_path / "-").exists()


def test_skills_export_dash_is_stdout_and_a_dangling_symlink_out_is_named(tmp_path):
    p = dvk(["skills", "export", "-", "--db", tmp_path / "lib.db"], timeout=60)
    assert p.returncode == 0 and json.loads(p.stdout.splitlines()[0])["name"]
    link = tmp_path / "runs"
    link.symlink_to(tmp_path / "gone")
    p = dvk(["bench", "--out", link / "b"], timeout=60)
    assert p.returncode == 2 and "is a symbolic link to" in p.stderr and "does not exist" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- the smaller rows
def test_read_only_skill_commands_never_create_a_library(tmp_path):
    typo = tmp_path / "sub" / "libary.db"
    for args in (["list", "--json"], ["search", "softmax", "--json"], ["show", "online_softmax", "--json"],
                 ["export", tmp_path / "lib.jsonl"]):
        p = dvk(["skills", *args, "--db", typo], timeout=60)
        assert p.returncode == 0, p.stderr[-2000:]
        assert "nothing was created" in p.stderr and not typo.exists() and not typo.parent.exists()
    assert len(json.loads(dvk(["skills", "list", "--json", "--db", typo], timeout=60).stdout)) >= 20
    p = dvk(["skills", "add", tmp_path / "lib.jsonl", "--db", typo], timeout=60)  # a write creates it
    assert p.returncode in (0, 2) and "Traceback" not in p.stderr


def test_skills_add_without_front_matter_shows_the_format(tmp_path):
    f = tmp_path / "my_skill.md"
    f.write_text("# Fuse bias and ReLU\nAdd the bias in the kernel.\n")
    p = dvk(["skills", "add", f, "--db", tmp_path / "lib.db"], timeout=60)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "name: my_skill" in p.stderr and "## Key Idea" in p.stderr and "docs/guides/skills.md" in p.stderr


def test_run_takes_tasks_patterns(tmp_path):
    write_suite(tmp_path, {"1_ReLU": RELU})
    p = dvk(["run", "--suite", f"kernelbench:{tmp_path / 'suite'}", "--model", "script:x.py", "--tasks", "*Softmax*",
             "--out", tmp_path / "r"], timeout=60)
    assert p.returncode == 2 and "--tasks pattern '*Softmax*' matches no task" in p.stderr
    assert not (tmp_path / "r").exists()


def test_an_unknown_config_key_says_did_you_mean(tmp_path):
    p = dvk(["train", "sft", "--config", TINY, "--out", tmp_path / "s", "sft.modle=tiny"], timeout=60)
    assert p.returncode == 2 and "unknown config key 'sft.modle': did you mean 'sft.model'?" in p.stderr
    p = dvk(["train", "rl", "--config", TINY, "--out", tmp_path / "s", "steps=3"], timeout=60)
    assert p.returncode == 2 and "did you mean 'rl.steps'?" in p.stderr


def test_report_compares_two_training_runs(tmp_path):
    runs = []
    for name, lr in (("a", 0.003), ("b", 0.01)):
        d = tmp_path / name
        d.mkdir()
        d.joinpath("metrics.jsonl").write_text("".join(json.dumps(
            {"step": s, "reward/policy": 0.1 * s * (2 if name == "b" else 1), "fast_1/policy": 0.05 * s,
             "loss/policy": 0.1}) + "\n" for s in range(1, 4)))
        d.joinpath("config.json").write_text(json.dumps({"rl": {"lr": lr, "steps": 3}, "out": str(d)}))
        runs.append(d)
    p = dvk(["report", *runs, "--out", tmp_path / "cmp", "--json"], timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["kind"] == "training" and doc["last"]["reward/policy"] == {"A": pytest.approx(0.3),
                                                                           "B": pytest.approx(0.6)}
    assert doc["last"]["fast_1/policy"]["B"] == pytest.approx(0.15)
    assert doc["config_diff"]["rl.lr"] == {"A": 0.003, "B": 0.01} and "rl.steps" not in doc["config_diff"]
    html = (tmp_path / "cmp" / "compare.html").read_text()
    assert "rl.lr" in html and "data:image/png;base64," in html and (tmp_path / "cmp" / "compare.png").is_file()


def test_docs_say_what_the_code_does():
    """cli.md's --timeout defaults are EvalConfig's; every extra of pyproject.toml is in
    development.md's table; the README's set-up command installs the extras CI installs."""
    import re
    tomllib = pytest.importorskip("tomllib")

    from davinci_kernel.config import EvalConfig

    root = Path(__file__).parents[1]
    cli_md = (root / "docs" / "cli.md").read_text()
    cfg = EvalConfig()
    assert f"{cfg.compile_timeout_s:g} s to\n  build and import and {cfg.run_timeout_s:g} s to run" in cli_md
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    dev_md = (root / "docs" / "development.md").read_text()
    assert all(f"| `{e}` |" in dev_md for e in extras), [e for e in extras if f"| `{e}` |" not in dev_md]
    ci = re.search(r'-e "\.\[([a-z,]+)\]"', (root / ".ci" / "run").read_text()).group(1)
    readme = re.search(r'pip install torch==\S+ -e "\.\[([a-z,]+)\]"', (root / "README.md").read_text()).group(1)
    assert set(readme.split(",")) == set(ci.split(",")) == set(extras)


def test_a_reward_is_declared_once_and_every_list_reads_it(monkeypatch):
    import dataclasses

    from davinci_kernel import reward_kinds as rk
    from davinci_kernel.config import RewardConfig, choices_of
    from davinci_kernel.errors import UsageError
    from davinci_kernel.integrations.kernel_reward import KernelReward
    from davinci_kernel.rollout.rewards import policy_reward

    assert choices_of(RewardConfig, "kind") == tuple(rk.REWARDS) == ("released", "tiered", "fastp")
    help_text = {f.name: f.metadata["help"] for f in dataclasses.fields(RewardConfig)}["kind"]
    assert all(f"{k.name} = {k.help}" in help_text for k in rk.REWARDS.values())
    monkeypatch.setitem(rk.REWARDS, "always_one", rk.RewardKind("always_one", "one for anything", lambda r, c: 1.0))
    assert policy_reward(None, RewardConfig(kind="always_one")) == 1.0  # the dispatch reads the table
    assert KernelReward(kind="always_one").reward_cfg.kind == "always_one"  # so do the TRL/verl adapters
    with pytest.raises(UsageError, match="always_one"):
        KernelReward(kind="nope")
