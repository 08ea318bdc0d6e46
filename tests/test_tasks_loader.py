"""KernelBench-format folders: what is listed and what is skipped."""

from __future__ import annotations

from davinci_kernel.tasks import load_suite

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
'''


def test_checkout_layout_skips_superseded_and_foreign_files(tmp_path):
    data = tmp_path / "KernelBench"  # a checkout root holds its problems in KernelBench/
    for rel in ["level1/1_Relu.py", "level1/2_Relu_Again.py", "level2/7_Conv_ReLU.py",
                "level2/7_Conv_ReLU_OLD.py", "level3/52_easy.py", "level9/abc_reference.py"]:
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        (data / rel).write_text(PROBLEM)
    (data / "level1" / "notes.txt").write_text("not a problem")
    tasks = load_suite(f"kernelbench:{tmp_path}")
    assert [t.name for t in tasks] == ["level1/1_Relu", "level1/2_Relu_Again", "level2/7_Conv_ReLU", "level3/52_easy"]
    assert [t.level for t in load_suite(f"kernelbench:{tmp_path}", level=2)] == [2]


def test_suite_id_gives_one_spelling_per_suite(tmp_path, monkeypatch):
    from davinci_kernel.tasks import suite_id

    kb = tmp_path / "kb"
    kb.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    want = f"kernelbench:{kb.resolve()}"
    assert {suite_id(s) for s in ("kernelbench:kb", "kernelbench:./kb/", "kernelbench:~/kb", str(kb), "kb/")} == {want}
    assert suite_id(want) == want  # what run.json records is already its own spelling
    assert suite_id("builtin") == "builtin"
    assert suite_id("hf:ScalingIntelligence/KernelBench") == "hf:ScalingIntelligence/KernelBench"
    assert suite_id("hf:kb") == f"hf:{kb.resolve()}"  # a dataset saved to disk is a folder
