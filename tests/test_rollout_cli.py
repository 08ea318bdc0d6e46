"""`dvk run` and `dvk optimize` end to end: scripted backbone, the real CPU evaluator.

The scripted model writes a correct Triton ReLU for the ReLU task and, for the second
task, first a reply without code and then a kernel that fails at run time. The run is
then interrupted on paper (the second task's result lines removed, a cut line appended)
and resumed: only the unfinished task is redone.
"""

import json
import socket

import pytest
from conftest import RELU, relu_kernel, script_env, write_script, write_suite
from conftest import run_dvk as dvk

SCALE = RELU.replace('"""ReLU.', '"""Scale by two.').replace("torch.relu(x)", "x * 2.0")

RESPOND = '''
def respond(request):
    task = request.messages[1]["content"]
    log("relu" if "ReLU" in task else "scale")
    if "ReLU" in task:
        return "Here:\\n```python\\n" + GOOD + "```"
    turn = sum(1 for m in request.messages if m["role"] == "user")
    if turn == 1:
        return "<think>this needs care</think>I am not sure how to do this."
    return "```python\\n" + BROKEN + "```"
'''


@pytest.fixture
def setup(tmp_path):
    write_suite(tmp_path, {"1_ReLU": RELU, "2_Scale": SCALE})
    script = write_script(tmp_path / "model.py", RESPOND, GOOD=relu_kernel(),
                          BROKEN=relu_kernel("tl.maximum(x, 0.0) + missing_name"))
    return tmp_path, script, script_env(tmp_path / "calls.log")


def test_run_writes_results_and_resumes(setup):
    tmp, script, env = setup
    out = tmp / "run"
    args = ["run", "--suite", f"kernelbench:{tmp / 'suite'}", "--model", f"script:{script}", "--skills", "off",
            "--turns", "2", "--device", "cpu", "--workers", "2", "--out", str(out)]
    p = dvk(args, env)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    by = {(r["task"], r["which"]): r for r in rows}
    assert set(by) == {("level1/1_ReLU", "last"), ("level1/1_ReLU", "best"),
                       ("level1/2_Scale", "last"), ("level1/2_Scale", "best")}
    assert by[("level1/1_ReLU", "last")]["correct"] is True and by[("level1/1_ReLU", "best")]["turn"] == 1
    scale = by[("level1/2_Scale", "last")]
    assert scale["correct"] is False and scale["compiled"] is True and scale["level"] == 1
    groups = [json.loads(x) for x in (out / "groups.jsonl").read_text().splitlines()]
    turns = groups[[g["task"] for g in groups].index("level1/2_Scale")]["episodes"][0]["turns"]
    assert turns[0]["parse_error"] == "the reply has no code block"
    assert "Format error" in turns[1]["messages"][-1]["content"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["last"]["1"]["fast_0"] == 0.5 and summary["best"]["all"]["n"] == 2
    assert "fast_1.2" in p.stdout or "fast_1" in p.stdout
    meta = json.loads((out / "run.json").read_text())
    assert meta["provenance"]["sandbox"] and meta["server_model"] is None  # a scripted model has no server

    # interrupt on paper: drop the Scale task's lines, leave a half-written line, resume
    keep = [x for x in (out / "results.jsonl").read_text().splitlines() if "2_Scale" not in x]
    (out / "results.jsonl").write_text("\n".join(keep) + '\n{"task": "level1/2_Sca')
    log = tmp / "calls.log"
    log.write_text("")
    p = dvk(args, env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert set(log.read_text().split()) == {"scale"}  # the finished ReLU task was not redone
    assert "1 run, 1 resumed" in p.stdout.replace("\n", " ")
    assert json.loads((out / "run.json").read_text())["resumed"] == 1
    # a different setting in the same directory is refused
    p = dvk(args[:-1] + [str(out)] + ["--turns", "3"], env)
    assert p.returncode == 2 and "turns=2" in p.stderr


def test_optimize_writes_best_and_trajectories(setup):
    tmp, script, env = setup
    out = tmp / "opt"
    p = dvk(["optimize", str(tmp / "suite" / "level1" / "1_ReLU.py"), "--model", f"script:{script}",
             "--turns", "1", "--rollouts", "2", "--skills", "off", "--device", "cpu", "--workers", "2",
             "--out", str(out)], env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "class ModelNew" in (out / "best.py").read_text()
    best = json.loads((out / "best.json").read_text())
    assert best["correct"] is True and best["where"] == [0, 0, 0]
    group = json.loads((out / "groups.jsonl").read_text().splitlines()[0])
    assert len(group["episodes"]) == 2 and "ok (untimed)" in p.stdout
    assert json.loads((out / "run.json").read_text())["provenance"]["python"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_is_one_line_exit_2(setup):
    tmp, _, env = setup
    url = f"http://127.0.0.1:{_free_port()}/v1"
    p = dvk(["run", "--suite", f"kernelbench:{tmp / 'suite'}", "--model", f"openai:{url}#m", "--out",
             str(tmp / "r")], env, timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and "vllm serve" in lines[0]
    assert not (tmp / "r").exists()


@pytest.mark.parametrize("args,fragment", [
    (["run", "--model", "nonsense"], "model spec"),
    (["run", "--model", "script:x.py", "--skills", "maybe"], "--skills maybe"),
    (["optimize", "missing.py", "--model", "script:x.py"], "problem file not found"),
])
def test_bad_input_is_usage_error(args, fragment, setup):
    _, _, env = setup
    p = dvk(args, env, timeout=60)
    assert p.returncode == 2 and fragment in p.stderr and "Traceback" not in p.stderr
