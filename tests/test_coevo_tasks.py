"""The co-evolution v2's tasks, variants and technique detector (bench/coevo/tasks,
bench/coevo/variants, bench/coevo/techniques.py).

Every task loads (the new ones as a suite folder); every variant written for v2 is judged by
the real evaluator on the CPU (Triton interpreter, the tasks' CPU_SHAPES, 2 trials, one
evaluator for all) as the manifest says, correct or not (the bench/learning kernels the
manifest reuses, with all the others, in a GPU test); the detector finds each variant's
technique where its role says so (fast / with_*) and not where it says not (slow, medium,
lacking_*); each technique's Example is detected, shows no other technique, holds no
``class ModelNew`` and passes the code policy. Speed roles (the spec's margins) are checked
in the GPU test only (``-m gpu``), as in the protocol's role check.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from davinci_kernel.evaluate.harness.codepolicy.policy import check_policy

ROOT = Path(__file__).resolve().parents[1]
COEVO = ROOT / "bench" / "coevo"
VARIANTS = COEVO / "variants"
sys.path.insert(0, str(ROOT / "bench"))
from coevo import family  # noqa: E402
from coevo.techniques import TECHNIQUE_IDS, TECHNIQUES, technique_present  # noqa: E402

MANIFEST = json.loads((VARIANTS / "manifest.json").read_text())
TASKS = MANIFEST["tasks"]
ENTRIES = [(task, v) for task, vs in TASKS.items() for v in vs]
NEW_TASKS = ("level2/11_HardSwish_Bias_Scale_Residual", "level2/12_Linear_Bias_SiLU", "level2/13_RMSNorm_Sigmoid_Scale",
             "level1/21_Mish_Residual", "level1/22_LeakyReLU_Scale_Bias") + tuple(m.task for _, m in family.members())
PRESENT = {"fast": True, "with": True, "slow": False, "medium": False, "lacking": False}


def _source(v: dict) -> str:
    return (VARIANTS / v["file"]).read_text()


@pytest.fixture(scope="module")
def tasks():
    from davinci_kernel.tasks.loader import load_suite

    out = {t.name: t for t in load_suite("builtin")}
    new = {t.name: t for t in load_suite(str(COEVO / "tasks"))}
    assert not set(out) & set(new), "a new task shadows a built-in one"
    return out | new


def test_the_new_tasks_load_as_a_suite_folder(tasks):
    from davinci_kernel.tasks.loader import check_problem_source, load_suite
    from davinci_kernel.tasks.shapes import cpu_overrides, perturbed_names

    new = load_suite(str(COEVO / "tasks"))
    assert sorted(t.name for t in new) == sorted(NEW_TASKS)
    for t in new:
        assert check_problem_source(t.source) is None, t.name
        assert ast.get_docstring(ast.parse(t.source)), t.name
        assert cpu_overrides(t.source) and perturbed_names(t.source), t.name
    assert set(TASKS) <= set(tasks)


def test_the_manifest_has_the_roles_and_pairs_of_the_spec():
    techs = MANIFEST["techniques"]
    assert tuple(techs) == TECHNIQUE_IDS and tuple(TECHNIQUES) == TECHNIQUE_IDS
    for tech, sets in techs.items():
        for task in (sets["rl_task"], sets["held_out_task"]):
            vs = TASKS[task]
            assert [v["name"] for v in vs if v["role"] != "wrong"] == ["slow", "medium", "fast"], task
            wrong = [v for v in vs if v["role"] == "wrong"]
            assert len(wrong) == 2 and all(v["name"].startswith("wrong_") and not v["correct"] for v in wrong), task
            assert all(v["technique"] == tech for v in vs)
        assert len(sets["practice_tasks"]) >= 2, tech
        for task in sets["practice_tasks"]:
            names = [v["name"] for v in TASKS[task]]
            assert names[-1] == f"with_{tech}" and any(n.startswith("lacking_") for n in names), task
            assert all(v["correct"] and v["technique"] == tech for v in TASKS[task])
    for task, v in ENTRIES:
        assert set(v) == {"name", "file", "correct", "role", "technique", "what"}, (task, v["name"])
        assert (VARIANTS / v["file"]).is_file(), v["file"]


def test_the_family_files_are_what_the_generator_writes():
    """bench/coevo/family.py owns its members' tasks, kernels and manifest entries."""
    files, entries = family.render()
    stale = [str(p.relative_to(COEVO)) for p, text in files.items() if not p.is_file() or p.read_text() != text]
    assert not stale, f"rerun python bench/coevo/family.py: {stale}"
    assert family.manifest_with(MANIFEST, entries) == MANIFEST
    for tech, ms in family.FAMILIES.items():  # activations x forms, each (activation, form) once
        assert len(ms) >= 6 and len({(m.act, m.form) for m in ms}) == len(ms), tech
        assert len({m.act for m in ms}) >= 6, tech


def test_the_family_command_checks_and_refuses_bad_input_in_one_line():
    import subprocess

    run = [sys.executable, str(COEVO / "family.py")]
    ok = subprocess.run(run + ["--check"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and ok.stdout.strip() == "the family files are current"
    bad = subprocess.run(run + ["--chek"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--chek" in bad.stderr


def _forward(path: Path) -> str:
    cls = next(n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == "Model")
    return ast.unparse(next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "forward"))


def test_no_family_member_has_a_held_out_or_rl_task_forward():
    from davinci_kernel.tasks.loader import BUILTIN_DIR

    sets = MANIFEST["techniques"].values()
    forbidden = {_forward(COEVO / "tasks" / f"{s['held_out_task']}.py") for s in sets}
    forbidden |= {_forward(BUILTIN_DIR / f"{s['rl_task']}.py") for s in sets}
    assert len(forbidden) == 6
    for _, m in family.members():
        assert _forward(COEVO / "tasks" / f"{m.task}.py") not in forbidden, m.task


ROLED = [(t, v) for t, v in ENTRIES if v["role"] in PRESENT]  # a wrong variant's technique is no part of its role


@pytest.mark.parametrize("task,variant", ROLED, ids=[f"{t}:{v['name']}" for t, v in ROLED])
def test_the_detector_follows_the_role(task, variant):
    assert technique_present(variant["technique"], _source(variant)) is PRESENT[variant["role"]]


@pytest.mark.parametrize("task,variant", ENTRIES, ids=[f"{t}:{v['name']}" for t, v in ENTRIES])
def test_every_variant_is_our_kind_of_file(task, variant):
    src = _source(variant)
    tree = ast.parse(src)
    assert ast.get_docstring(tree), variant["file"]
    assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
    assert [str(x) for x in check_policy(tree)] == []


@pytest.mark.parametrize("tech", TECHNIQUE_IDS)
def test_each_example_shows_its_technique_and_no_other(tech):
    d = TECHNIQUES[tech]
    assert set(d) == {"title", "trigger", "key_idea", "example"} and all(d.values())
    ex = d["example"]
    assert "class ModelNew" not in ex and "def forward" not in ex
    assert technique_present(tech, ex)
    assert not any(technique_present(o, ex) for o in TECHNIQUE_IDS if o != tech)
    header = "import torch\nimport triton\nimport triton.language as tl\n\n\n"  # as a kernel file has them
    assert [str(x) for x in check_policy(ast.parse(header + ex))] == []


def test_the_detector_on_sources_that_show_nothing():
    assert not any(technique_present(t, "def f(:\n") for t in TECHNIQUE_IDS)  # does not parse
    assert not any(technique_present(t, "x = 1\n") for t in TECHNIQUE_IDS)
    with pytest.raises(ValueError, match="known: fuse_elementwise_chain"):
        technique_present("no_such_technique", "x = 1\n")


def test_the_detector_counts_launches_through_helpers():
    """Two launches from forward through one helper are two kernels run: not one fused pass."""
    ex = TECHNIQUES["fuse_elementwise_chain"]["example"].split("\nchain_kernel[")[0]
    one = ex + ("\ndef run(a, b, out, n):\n    chain_kernel[(triton.cdiv(n, 2048),)](a, b, out, n, 1.0, BLOCK=2048,"
                " num_warps=8)\n\n\nclass M:\n    def forward(self, a, b, out, n):\n        run(a, b, out, n)\n")
    assert technique_present("fuse_elementwise_chain", one)
    two = one.replace("        run(a, b, out, n)\n", "        run(a, b, out, n)\n        run(out, b, out, n)\n")
    assert not technique_present("fuse_elementwise_chain", two)
    assert not technique_present("fuse_elementwise_chain", one.replace("num_warps=8", "num_warps=1"))
    reference_first = "class Model:\n    def forward(self, a):\n        return a\n\n\n" + one.replace("class M:", "class ModelNew:")
    assert technique_present("fuse_elementwise_chain", reference_first)  # ModelNew's forward is the one run


def test_a_kernel_shown_without_its_launch_is_judged_by_its_defaults_or_configs():
    kernel = TECHNIQUES["fuse_elementwise_chain"]["example"].split("\nchain_kernel[")[0]
    assert not technique_present("fuse_elementwise_chain", kernel)  # BLOCK not given anywhere
    wide = kernel.replace("BLOCK: tl.constexpr)", "BLOCK: tl.constexpr = 2048)")
    assert technique_present("fuse_elementwise_chain", wide)
    assert not technique_present("fuse_elementwise_chain", wide.replace("= 2048)", "= 64)"))
    tuned = ("@triton.autotune(configs=[triton.Config({'BLOCK': 1024}, num_warps=4), "
             "triton.Config({'BLOCK': 4096}, num_warps=8)], key=['n'])\n" + kernel)
    assert technique_present("fuse_elementwise_chain", tuned)
    assert not technique_present("fuse_elementwise_chain", tuned.replace("'BLOCK': 1024", "'BLOCK': 128"))


def test_the_detector_wants_the_epilogue_before_the_store():
    ex = TECHNIQUES["gemm_tile128_fused_epilogue"]["example"]
    no_epilogue = ex.replace("    acc = tl.abs(acc + tl.load(c_ptr + rn, mask=rn < N, other=0.0)[None, :])"
                             "   # epilogue on the accumulator\n", "")
    assert no_epilogue != ex and not technique_present("gemm_tile128_fused_epilogue", no_epilogue)
    assert not technique_present("gemm_tile128_fused_epilogue", ex.replace("BLOCK_N=128", "BLOCK_N=64"))


def _judge(tasks, entries, device: str, cache) -> dict:
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    cfg = EvalConfig(device=device, cache_dir=str(cache), trials=2, perturb_shapes=False, baseline_compile=False)
    with Evaluator(cfg, workers=2 if device == "cpu" else 1) as ev:
        results = ev.evaluate_many([(tasks[t], _source(v)) for t, v in entries])
    return {(t, v["name"]): r for (t, v), r in zip(entries, results)}


def _agrees(variant: dict, r) -> None:
    assert not r.error_kind or not variant["correct"], (r.error_kind, r.error_msg)
    assert r.correct is variant["correct"], (r.stage, r.error_kind, r.error_msg, r.max_abs_diff)


# Judged on the CPU in CI: the kernels written for v2 (files in bench/coevo/variants). The
# bench/learning kernels the manifest reuses are judged on the GPU (below, and by the
# protocol's role check), which keeps this file near 45 s on 2 cores.
OURS = [(t, v) for t, v in ENTRIES if not v["file"].startswith("..")]
REUSED = [(t, v) for t, v in ENTRIES if v["file"].startswith("..")]


@pytest.fixture(scope="module")
def verdicts(tasks, tmp_path_factory):
    """Every v2 variant judged once on the CPU, by one evaluator."""
    return _judge(tasks, OURS, "cpu", tmp_path_factory.mktemp("cache"))


@pytest.mark.parametrize("task,variant", OURS, ids=[f"{t}:{v['name']}" for t, v in OURS])
def test_the_evaluator_agrees_with_the_manifest(task, variant, verdicts):
    _agrees(variant, verdicts[(task, variant["name"])])


@pytest.mark.gpu
def test_the_variants_keep_their_roles_on_the_gpu(tasks, tmp_path):
    """Every variant of the manifest (the reused bench/learning kernels too) at the tasks' GPU
    sizes: judged as the manifest says, and on the RL and held-out tasks the spec's margins
    with p = 1.2 and m = 1.3: fast >= p*m = 1.56x eager, slow and medium <= p/m = 0.923x."""
    got = _judge(tasks, ENTRIES, "cuda", tmp_path)
    speed = {}
    for t, v in ENTRIES:
        r = got[(t, v["name"])]
        speed[(t, v["name"])] = r.speedup
    print("ROLES", json.dumps({f"{t}:{n}": [got[(t, n)].correct, s, got[(t, n)].error_kind]
                               for (t, n), s in speed.items()}))  # the measured table
    for t, v in ENTRIES:
        _agrees(v, got[(t, v["name"])])
    far = []
    for sets in MANIFEST["techniques"].values():
        for t in (sets["rl_task"], sets["held_out_task"]):
            s = {role: speed[(t, role)] or 0.0 for role in ("slow", "medium", "fast")}
            if s["fast"] < 1.2 * 1.3 or max(s["slow"], s["medium"]) > 1.2 / 1.3:
                far.append(f"{t}: {s}")
    assert not far, far
