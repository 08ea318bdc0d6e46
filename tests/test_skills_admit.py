"""Admission: content filter, dedup, verification thresholds, staging and commit."""

from dataclasses import replace

import pytest

from davinci_kernel.config import SkillsConfig
from davinci_kernel.records import EvalResult, Skill
from davinci_kernel.skills.admit import Admission, Verification, content_filter, dedup, verify
from davinci_kernel.skills.store import SkillStore

BODY = "## Motivation\n{m}\n## Key Idea\n{k}\n## Example\n```python\n{code}\n```\n"
KERNEL = """import triton
import triton.language as tl

@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
"""


def mk(name="fuse_things", m="When ops chain.", k="Fuse them in one kernel.", code=KERNEL, speed=None):
    return Skill(name=name, description="fuse", content=BODY.format(m=m, k=k, code=code), verify_speedup=speed)


@pytest.mark.parametrize("key_idea,code,why", [
    ("Just use torch.compile on the module.", KERNEL, "torch.compile"),
    ("Call cuBLAS through the library for the GEMM.", KERNEL, "cuBLAS"),
    ("Fall back to the PyTorch op for odd shapes.", KERNEL, "torch fallback"),
    ("Hard-code the input shape so the compiler unrolls.", KERNEL, "hard-codes"),
    ("Skip the computation for rows that look padded.", KERNEL, "skips work"),
    ("Cast the inputs to fp16 to make it faster.", KERNEL, "lowers precision"),
    ("Fuse.", "import torch\ndef run(x):\n    return torch.nn.functional.softmax(x, -1)", "computes with torch"),
    ("Fuse.", "def run(x):\n    return x.half() * 2", "computes with torch"),
    ("Fuse.", "src = 'cudnnConvolutionForward(h)'", "cuDNN"),
    ("Fuse.", "src = 'return at::matmul(a, b);'", "ATen"),
    ("Fuse.", "def broken(:\n", "does not parse"),
])
def test_filter_rejects(key_idea, code, why):
    reason = content_filter(mk(k=key_idea, code=code))
    assert reason is not None and why.lower() in reason.lower(), reason


def test_filter_accepts_negations_and_checks():
    code = KERNEL + "\nif __name__ == '__main__':\n    import torch\n    assert torch.matmul(1, 1)\n"
    idea = "Never hard-code shapes and do not fall back to torch ops; unlike cuBLAS this fuses."
    assert content_filter(mk(k=idea, code=code)) is None


def test_filter_structure():
    assert "snake_case" in content_filter(mk(name="BadName"))
    no_example = Skill(name="a_b", description="d", content="## Motivation\nm\n## Key Idea\nk\n")
    assert "## Example" in content_filter(no_example)


def test_dedup():
    lib = [mk("fuse_things", speed=1.5)]
    res = dedup(mk("fuse_things", m="Totally different trigger words here.", k="other idea text entirely",
                   code="x = 1"), lib)
    assert res.action == "add" and res.skill.name == "fuse_things_2"
    near = mk("fuse_again", speed=2.0)
    res = dedup(near, lib)
    assert res.action == "replace" and res.other == "fuse_things"
    assert dedup(mk("fuse_again", speed=1.1), lib).action == "drop"


def test_verify_thresholds():
    cfg = SkillsConfig()
    ok = verify(mk(), lambda s: EvalResult(correct=True, speedup=2.0, device="H200"), 1.5, cfg)
    assert ok.ok and ok.gpu == "H200"
    low_gain = verify(mk(), lambda s: {"correct": True, "speedup": 1.5}, 1.5, cfg)
    assert not low_gain.ok and "1.80x" in low_gain.reason
    wrong = verify(mk(), lambda s: {"correct": False, "speedup": 9.0}, 1.0, cfg)
    assert not wrong.ok and "not correct" in wrong.reason
    assert not verify(mk(), lambda s: {"correct": True, "speedup": 1.1}, 0.5, cfg).ok


def _ver(name, speed, ok=True):
    return Verification(skill=name, correct=ok, speedup=speed, original_speedup=1.0, ok=ok,
                        reason=None if ok else "no")


def test_admission_one_per_task_commit_after_update(tmp_path):
    store = SkillStore(tmp_path / "lib.db")
    adm = Admission()
    assert adm.stage("t1", mk("skill_a"), _ver("skill_a", 1.5)).staged
    assert adm.stage("t1", mk("skill_b", m="Different trigger.", k="Another idea.", code="x = 2"),
                     _ver("skill_b", 2.5)).staged
    assert not adm.stage("t1", mk("skill_c"), _ver("skill_c", 1.3)).staged
    assert not adm.stage("t2", mk("skill_d"), _ver("skill_d", 3.0, ok=False)).staged
    assert not adm.stage("t2", mk("bad_one", k="Just use torch.compile."), _ver("bad_one", 3.0)).staged
    assert len(store) == 0  # nothing written before commit
    written = adm.commit(store, step=4)
    assert [s.name for s in written] == ["skill_b"]
    got = store.get("skill_b")
    assert (got.step, got.source_task, got.verify_speedup) == (4, "t1", 2.5)
    assert store.names(3) == [] and adm.staged == {}
    adm.stage("t3", mk("skill_e", m="Other.", k="Else.", code="y = 3"), _ver("skill_e", 2.0))
    adm.discard()
    assert adm.commit(store, step=5) == [] and store.names() == ["skill_b"]


def test_consider_filters_before_verifying(tmp_path):
    calls = []
    adm = Admission()
    d = adm.consider("t", mk(k="Just use torch.compile."), lambda s: calls.append(s) or {"correct": True,
                                                                                         "speedup": 5.0},
                     1.0, SkillsConfig())
    assert not d.staged and calls == []
    d = adm.consider("t", mk(), lambda s: {"correct": True, "speedup": 5.0}, 1.0, SkillsConfig())
    assert d.staged and d.speedup == 5.0


def test_commit_near_duplicate_keeps_better(tmp_path):
    store = SkillStore(tmp_path / "lib.db")
    store.add(replace(mk("fuse_things"), verify_speedup=1.4), step=0)
    adm = Admission()
    adm.stage("t9", mk("fuse_things_v2"), _ver("fuse_things_v2", 2.0))
    adm.commit(store, step=1)
    assert store.names() == ["fuse_things_v2"] and store.names(0) == ["fuse_things"]
