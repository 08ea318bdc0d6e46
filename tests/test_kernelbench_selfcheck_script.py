"""bench/kernelbench_selfcheck.py without a GPU: the committed JSON, the per-level table beside
KernelBench's published H100 times, and the PNG, built from a fake self-check run directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "kernelbench_selfcheck.py"


def _row(task, level, speedup=1.0, eager=2.0, **kw):
    r = {"task": task, "level": level, "compiled": True, "correct": True, "self_check": True, "stage": "done",
         "device": "cuda:0", "trials": 5, "trials_passed": 5, "flags": [], "warnings": [], "error_kind": None,
         "error_msg": None, "timing_available": True, "verifiable": True, "speedup": speedup,
         "ref_runtime_ms": eager, "runtime_ms": eager / speedup if speedup else None, "eval_seconds": 3.25,
         "timing_detail": {"plan": {"sets": 2, "peak_bytes": 3000, "measured_peak_bytes": 2500}}, "candidate": None}
    r.update(kw)
    return r


def _fake(tmp_path):
    kb = tmp_path / "KernelBench" / "KernelBench"
    (kb / "level1").mkdir(parents=True)
    timing = tmp_path / "KernelBench" / "results" / "timing" / "H100_Test"
    timing.mkdir(parents=True)
    (timing / "baseline_time_torch.json").write_text(json.dumps({
        "level1": {"1_A.py": {"mean": 4.0, "num_trials": 100}, "2_B.py": {"mean": 1.0, "num_trials": 100}},
        "level2": {"1_C.py": {"mean": 9.0}}}))
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"kind": "bench", "candidates": "self", "self_check": True,
                                              "totals": {"1": 3, "2": 100}}))
    rows = [_row("level1/1_A", 1, speedup=1.01, eager=2.0),
            _row("level1/2_B", 1, speedup=0.9, eager=0.5, timing_detail={"plan": {"peak_bytes": 77}}),
            _row("level1/3_Big", 1, correct=False, stage="timing", error_kind="too_large", speedup=None,
                 eager=None, error_msg="inputs need 300 GB", timing_detail={}),
            _row("level2/1_C", 2, speedup=1.0, eager=3.0,
                 warnings=["reference_mutates_inputs: forward changed input 0"])]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"task": "level2/2_cu')
    (run / "selfcheck_calls.jsonl").write_text(json.dumps(  # as the GPU machine recorded its call
        {"level": 1, "seconds": 412.5, "exit": 0, "cut": False, "date": "2026-12-02T10:00:00",
         "gpu": "NVIDIA H200", "torch": "2.11.0+cu130"}) + "\n")
    return kb, run


def test_builds_json_table_and_plot_without_gpu(tmp_path):
    kb, run = _fake(tmp_path)
    out_json, out_png = tmp_path / "sc.json", tmp_path / "sc.png"
    p = subprocess.run([sys.executable, str(SCRIPT), "--kb", kb, "--out", run, "--no-run", "--json-out", out_json,
                        "--plot", out_png, "--gpu", "NVIDIA H200"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out_json.read_text())
    assert set(doc) >= {"gpu", "torch", "date", "problems"} and doc["gpu"] == "NVIDIA H200"
    assert doc["torch"] == "2.11.0+cu130" and doc["calls"][0]["seconds"] == 412.5  # the GPU machine's, not ours
    probs = {q["task"]: q for q in doc["problems"]}
    assert list(probs) == ["level1/1_A", "level1/2_B", "level1/3_Big", "level2/1_C"]  # the cut line is no result
    for q in probs.values():
        assert set(q) == {"task", "level", "finished", "why", "speedup", "eager_ms", "peak_gpu_bytes", "seconds"}
    assert probs["level1/1_A"] == {"task": "level1/1_A", "level": 1, "finished": True, "why": None, "speedup": 1.01,
                                   "eager_ms": 2.0, "peak_gpu_bytes": 2500, "seconds": 3.25}
    assert probs["level1/2_B"]["peak_gpu_bytes"] == 77  # no measurement: the plan's estimate
    assert not probs["level1/3_Big"]["finished"] and "too_large" in probs["level1/3_Big"]["why"]
    assert probs["level1/3_Big"]["peak_gpu_bytes"] is None
    assert probs["level2/1_C"]["finished"] and "input_mutation" in probs["level2/1_C"]["why"]
    lv = doc["levels"]
    assert lv["1"]["problems"] == 3 and lv["1"]["finished"] == 2 and lv["1"]["within_2pct"] == 0.5
    assert lv["1"]["H100_Test"]["matched"] == 2
    assert abs(lv["1"]["H100_Test"]["ratio"] - 2.0) < 1e-9  # 4/2 and 1/0.5
    assert lv["2"]["problems"] == 100 and lv["2"]["run"] == 1 and lv["2"]["H100_Test"]["matched"] == 1
    assert abs(lv["2"]["H100_Test"]["ratio"] - 3.0) < 1e-9
    assert "H100_Test / ours" in p.stdout and "2.00 (n=2)" in p.stdout
    assert "level1/3_Big: timing: too_large" in p.stdout
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_refuses_a_run_that_is_not_a_self_check(tmp_path):
    kb, run = _fake(tmp_path)
    (run / "run.json").write_text(json.dumps({"kind": "bench", "candidates": "/some/cands"}))
    p = subprocess.run([sys.executable, str(SCRIPT), "--kb", kb, "--out", run, "--no-run",
                        "--json-out", tmp_path / "x.json", "--plot", tmp_path / "x.png"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.strip().startswith("error:") and "not a self-check" in p.stderr
    assert not (tmp_path / "x.json").exists()


def test_a_level_call_is_cut_at_its_budget_and_recorded(tmp_path, monkeypatch):
    """--budget-s: a call still running at its budget gets SIGINT (Ctrl-C: what finished is
    kept, the next call resumes) and the call is recorded as cut, with its seconds."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("kb_selfcheck", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    slow = [sys.executable, "-c", "import signal, sys, time\n"
            "signal.signal(signal.SIGINT, lambda *a: sys.exit(130))\ntime.sleep(60)"]
    real = subprocess.Popen
    monkeypatch.setattr(mod.subprocess, "Popen", lambda cmd, **kw: real(slow, **kw))  # a dvk bench that never ends
    out = tmp_path / "run"
    out.mkdir()
    call = mod.run_level(tmp_path, 1, out, None, budget_s=1.0)
    assert call["cut"] and call["exit"] == 130 and 1.0 <= call["seconds"] < 30
    recorded = [json.loads(x) for x in (out / mod.CALLS_FILE).read_text().splitlines()]
    assert recorded == [call]


def test_a_new_run_folder_is_merged_into_the_committed_record(tmp_path):
    """A problem the new folder has not judged keeps its committed entry and the committed
    calls stay counted; a problem judged again takes its new line; a call is never counted twice."""
    kb, run = _fake(tmp_path)
    out_json, out_png = tmp_path / "sc.json", tmp_path / "sc.png"
    old_call = {"level": 3, "seconds": 300.0, "exit": 130, "cut": True, "date": "2026-12-01T09:00:00",
                "gpu": "NVIDIA H200", "torch": "2.11.0+cu130"}
    same_call = {"level": 1, "seconds": 412.5, "exit": 0, "cut": False, "date": "2026-12-02T10:00:00",
                 "gpu": "NVIDIA H200", "torch": "2.11.0+cu130"}
    committed = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130", "date": "2026-12-01", "calls": [old_call, same_call],
                 "levels": {}, "problems": [
                     {"task": "level3/5_Old", "level": 3, "finished": True, "why": None, "speedup": 1.002,
                      "eager_ms": 7.0, "peak_gpu_bytes": 10, "seconds": 9.0},
                     {"task": "level1/1_A", "level": 1, "finished": False, "why": "timing: timing_mismatch",
                      "speedup": None, "eager_ms": 2.0, "peak_gpu_bytes": 10, "seconds": 9.0}]}
    out_json.write_text(json.dumps(committed))
    (kb / "level1" / "1_A.py").write_text("# judged\n")
    (kb / "level1" / "4_D.py").write_text("# a problem no folder has judged\n")
    p = subprocess.run([sys.executable, str(SCRIPT), "--kb", kb, "--out", run, "--no-run", "--json-out", out_json,
                        "--plot", out_png], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out_json.read_text())
    probs = {q["task"]: q for q in doc["problems"]}
    assert probs["level3/5_Old"] == committed["problems"][0]
    assert probs["level1/1_A"]["finished"] and probs["level1/1_A"]["speedup"] == 1.01  # judged again: the new line
    assert list(probs)[-1] == "level3/5_Old" and len(probs) == 6
    assert probs["level1/4_D"]["finished"] is False and probs["level1/4_D"]["why"].startswith("not run")
    assert doc["levels"]["1"]["run"] == 3 and doc["levels"]["1"]["problems"] == 3
    assert doc["calls"] == [old_call, same_call]
    assert doc["levels"]["3"]["finished"] == 1 and doc["levels"]["3"]["call_seconds"] == 300.0
