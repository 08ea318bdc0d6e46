"""Admission: content filter, dedup, verification thresholds, staging and commit."""

from dataclasses import replace

import pytest

from davinci_kernel.config import SkillsConfig
from davinci_kernel.records import EvalResult, Skill
from davinci_kernel.skills.admit import (
    COPY_CONTAINMENT,
    Admission,
    Verification,
    containment,
    content_filter,
    dedup,
    example_candidate,
    refusal_name,
    verify,
)
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


# ----------------------------------------------------------------------------- technique, not solution
ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
SWISH = "level2/5_Swish_Scale_Clamp_Residual"
SWISH_FAST = (ROOT / "bench/learning/variants" / SWISH / "fused_block4096.py").read_text()
SWISH_KERNEL = "@triton.jit" + SWISH_FAST.split("class ModelNew")[0].split("@triton.jit")[1]
# the technique: one load, the chain in registers, one store; 4096 per program, 8 warps (launch only)
TECHNIQUE = SWISH_KERNEL + '''

def launch(x, y, *scalars):
    n = x.numel()
    swish_clamp_kernel[(triton.cdiv(n, 4096),)](x, y, n, *scalars, BLOCK=4096, num_warps=8)
'''
# the fast kernel's forward rewritten as a function: the task's solution, under another name
SOLVER = SWISH_FAST.split("class ModelNew")[0] + '''
def swish_clamp(x, scale_factor, clamp_min, clamp_max):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    swish_clamp_kernel[(triton.cdiv(n, 4096),)](x, y, n, scale_factor, clamp_min, clamp_max, BLOCK=4096,
                                                num_warps=8)
    return y
'''


@pytest.mark.parametrize("code", [
    SWISH_FAST,  # the whole candidate file
    KERNEL + "\nclass Fused(nn.Module):\n    def forward(self, x):\n        return x\n",  # any module class
    KERNEL + "\nclass Launcher:\n    def forward(self, x):\n        return x\n",
    KERNEL + "\nModelNew = Fused\n",
])
def test_filter_refuses_an_example_that_defines_a_module(code):
    reason = content_filter(mk(code=code))
    assert reason is not None and reason.startswith("example_defines_module: "), reason
    assert refusal_name(reason) == "example_defines_module"
    d = Admission().consider("t", mk(code=code), lambda s: pytest.fail("verified"), 1.0, SkillsConfig())
    assert not d.staged and d.rule == "example_defines_module"


def test_filter_refuses_an_example_that_copies_the_best_kernel():
    """The fast file without its class line (its methods as plain functions) is still the
    task's solution pasted; the kernel alone with its launch (the technique) holds well
    under the limit and passes."""
    head, cls = SWISH_FAST.split("class ModelNew(nn.Module):\n")
    copied = head + "".join(line[4:] + "\n" for line in cls.splitlines())  # its methods as plain functions
    reason = content_filter(mk(code=copied), best_code=SWISH_FAST)
    assert reason is not None and refusal_name(reason) == "example_copies_best_kernel", reason
    assert containment(copied, SWISH_FAST) >= COPY_CONTAINMENT
    assert content_filter(mk(code=copied)) is None  # no source given: nothing to compare with
    assert content_filter(mk(code=TECHNIQUE), best_code=SWISH_FAST) is None
    assert containment(TECHNIQUE, SWISH_FAST) < 0.5
    d = Admission().stage("t", mk(code=copied), _ver("fuse_things", 3.0), best_code=SWISH_FAST)
    assert not d.staged and d.rule == "example_copies_best_kernel"


def test_example_candidate_wraps_what_a_policy_would_paste():
    assert example_candidate(mk(code=SWISH_KERNEL)) is None  # a kernel alone cannot be a candidate
    assert example_candidate(mk(code=KERNEL + "\nif __name__ == '__main__':\n    k[(1,)](0, 1, BLOCK=4)\n")) is None
    cand = example_candidate(mk(code=SOLVER))
    assert "class ModelNew(nn.Module)" in cand and "return swish_clamp(*args[:max(4, min(len(inputs), 4))])" in cand
    assert "return launch(*args)" in example_candidate(mk(code=TECHNIQUE))  # *scalars: all of them
    with_default = KERNEL + "\ndef double(x, BLOCK=1024):\n    k[(1,)](x, x.numel(), BLOCK=BLOCK)\n    return x\n"
    assert "return double(*args[:max(1, min(len(inputs), 2))])" in example_candidate(mk(code=with_default))
    assert example_candidate(mk(code=SWISH_FAST)).count("class ModelNew") == 1
    assert example_candidate(mk(code=KERNEL + "\nclass Fused:\n    def forward(self, x):\n        return x\n")
                             ).endswith("class ModelNew(Fused):\n    pass\n")


def test_verify_refuses_an_example_judged_correct_alone():
    cfg = SkillsConfig()
    fast = lambda s: {"correct": True, "speedup": 3.0}  # noqa: E731
    v = verify(mk(), fast, 1.0, cfg, example_result={"correct": True, "speedup": 3.0})
    assert not v.ok and refusal_name(v.reason) == "example_solves_task"
    assert verify(mk(), fast, 1.0, cfg, example_result={"correct": False}).ok
    d = Admission().stage("t", mk(), v)
    assert not d.staged and d.rule == "example_solves_task"


def test_a_pasted_example_that_solves_its_task_is_judged_correct_by_the_real_evaluator(cpu_evaluator):
    """The execution check on the CPU evaluator (Triton interpreter): the fast kernel's
    forward rewritten as a function, pasted alone, passes the source task (so the skill is
    refused); the technique's launch helper, pasted alone, does not (it returns nothing)."""
    from davinci_kernel.tasks import load_task

    task = load_task(SWISH)
    assert content_filter(mk(code=SOLVER), best_code=SWISH_FAST) is None  # no static rule catches it
    solver, technique = cpu_evaluator.evaluate_many([(task, example_candidate(mk(code=SOLVER))),
                                                     (task, example_candidate(mk(code=TECHNIQUE)))])
    assert solver.correct, (solver.error_kind, solver.error_msg, solver.flags)
    assert not technique.correct
    v = verify(mk(code=SOLVER), lambda s: {"correct": True, "speedup": 3.0}, 0.6, SkillsConfig(),
               example_result=solver)
    assert not v.ok and v.reason.startswith("example_solves_task: ")
