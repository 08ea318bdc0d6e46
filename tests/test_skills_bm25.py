"""Code-aware tokenizer, bm25s index, filters, random fallback, task queries."""

import numpy as np

from davinci_kernel.records import Skill, Task
from davinci_kernel.skills.bm25 import SkillIndex, task_query, tokenize, torch_ops
from davinci_kernel.skills.seed_build import load_sources

PROBLEM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """Conv2d followed by BatchNorm and ReLU."""
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3)
        self.bn = nn.BatchNorm2d(c_out)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))

def get_inputs():
    return [torch.randn(8, 3, 32, 32)]

def get_init_inputs():
    return [3, 16]
'''


def seed_skills():
    return [s for s, _, _ in load_sources()]


def test_tokenizer_keeps_and_splits_identifiers():
    toks = tokenize("out = tl.load(x_ptr + offs); BatchNorm2d; __syncthreads(); The softmaxKernel")
    for t in ("tl.load", "tl", "load", "x_ptr", "ptr", "batchnorm2d", "batch", "norm",
              "__syncthreads", "syncthreads", "softmaxkernel", "softmax", "kernel"):
        assert t in toks, t
    assert "the" not in toks
    assert "loads" not in tokenize("tl.load")  # no stemming


def test_scores_match_bm25s():
    skills = seed_skills()
    idx = SkillIndex(skills)
    q = "online softmax tl.dot reduction"
    mine = idx.scores(q)
    ref = idx._retriever.get_scores([t for t in tokenize(q) if t in idx._vocab])
    np.testing.assert_allclose(mine, ref, rtol=1e-5)


def test_search_finds_relevant_and_filters():
    idx = SkillIndex(seed_skills())
    assert idx.search("welford variance layernorm", k=3)[0].name == "welford_layernorm"
    assert idx.search("__shfl_down_sync warp reduction", k=3)[0].name == "cuda_warp_shuffle_reduction"
    cuda_only = idx.search("reduction", k=20, tags=["cuda"])
    assert cuda_only and all("cuda" in s.tags for s in cuda_only)
    assert idx.search("reduction", k=5, scope="task_specific/") == []  # seeds are all general
    custom = Skill(name="special_conv", description="conv trick", scope="task_specific/conv",
                   content="## Motivation\na\n## Key Idea\nconv\n## Example\nx")
    idx2 = SkillIndex(seed_skills() + [custom])
    assert [s.name for s in idx2.search("conv", scope="task_specific/")] == ["special_conv"]
    assert all(s.scope == "general" for s in idx2.search("conv", scope="general"))


def test_random_sample_when_nothing_matches():
    skills = seed_skills()
    idx = SkillIndex(skills)
    a = idx.search_scored("qqqq zzzz", k=5, seed=1)
    b = idx.search_scored("qqqq zzzz", k=5, seed=1)
    assert len(a) == 5 and [s.name for s, _ in a] == [s.name for s, _ in b]
    assert all(score == 0.0 for _, score in a)
    assert len(idx.search("qqqq", k=100)) == len(skills)
    assert SkillIndex([]).search("anything") == []


def test_task_query_uses_ops_and_level():
    task = Task(name="level2/1_Conv_BN_ReLU", level=2, problem_id=1, source=PROBLEM)
    ops = torch_ops(PROBLEM)
    assert {"Conv2d", "BatchNorm2d", "relu"} <= set(ops)
    q = task_query(task)
    assert "level2" in q and "fold" in q and "implicit" in q
    top = [s.name for s in SkillIndex(seed_skills()).search(q, k=5)]
    assert "fold_batchnorm_into_conv" in top
