"""The co-evolution experiment's protocol, committed before any GPU run, and each arm's config.

``PROTOCOL`` holds everything that decides the outcome: the evaluation tasks and the role
of each of their variants, the practice tasks, the SFT mix, the model, the RL settings,
the arms (each one switch away from ``full``), the seeds, the steps, the time budgets
and the success criteria. ``TINY`` is the CPU smoke's version of it (same keys, a tiny
model, one task, one step). ``arm_config`` turns (protocol, arm, seed) into the trainer's
``Config`` (bf16 asked for everywhere: it applies where the GPU has it, so a config does not
depend on the machine); ``recorded`` is that config as ``run.json`` keeps it (the arm's
folder written as ``{work}``, the run folder as ``{dir}``), so arms can be compared field
by field (``config_diff``).
"""

from __future__ import annotations

import copy
from pathlib import Path

from kernel_variants import MODEL_SHAPE, TINY_SHAPE

ROOT = Path(__file__).resolve().parents[2]
VARIANT_DIRS = (ROOT / "bench" / "learning" / "variants", ROOT / "bench" / "learning" / "extra_variants")

MODEL, TINY_MODEL = MODEL_SHAPE, TINY_SHAPE  # 4.0M parameters, 15.3 MiB in float32; a CPU-sized one

ARMS = ("full", "no_admission", "frozen", "no_joint_training")

PROTOCOL: dict = {
    "name": "coevolution",
    "version": 1,
    # Evaluation tasks: slow and medium variants below 1.2x eager on the H200 (so turn-1
    # Fast_1.2 counts the fast variant only), the fast one above 1.2x and at least 1.2x the
    # medium one (so a slow-or-medium turn 1 followed by a fast turn 2 fires the summary
    # trigger and its skill can pass verification). Speedups measured on the H200 in
    # bench/results/learning_run_h200.json; the two "slow" variants of the level-2 tasks are
    # new (bench/learning/extra_variants) and slower by construction than their "medium".
    "eval_tasks": {
        "level1/3_Softmax": {"slow": "slow_block32", "medium": "two_pass", "fast": "fused_one_pass",
                             "wrong": ["wrong_exp2_unscaled", "wrong_load_unmasked"]},
        "level2/5_Swish_Scale_Clamp_Residual": {"slow": "slow_unfused_block32", "medium": "slow_block32",
                                                "fast": "fused_block4096",
                                                "wrong": ["wrong_missing_residual", "wrong_clamp_before_scale"]},
        "level2/1_Linear_Bias_GELU": {"slow": "slow_tile16_unfused", "medium": "slow_tile16", "fast": "fused_tile128",
                                      "wrong": ["wrong_bias_row_index", "wrong_gelu_no_half"]},
    },
    # Practice tasks (disjoint from the evaluation tasks): every other level-1/2 built-in
    # task; its kernels are the built-in reference and, where bench/learning/variants has
    # them, the correct variants.
    "practice_tasks": [
        "level1/1_Matmul", "level1/2_BatchedMatmul", "level1/4_LayerNorm", "level1/5_RMSNorm_FP16",
        "level1/6_CrossEntropy", "level1/7_Cumsum", "level1/8_MeanReduction", "level1/9_DepthwiseConv2d",
        "level1/10_L2Normalize", "level2/2_Linear_Scale_Residual_LayerNorm", "level2/3_Matmul_Scale_Softmax",
        "level2/4_Conv2d_BiasAdd_ReLU_MaxPool", "level2/6_RMSNorm_SiLU_Gate", "level2/7_GroupNorm_SiLU_Residual",
        "level2/8_LayerNorm2d_ChannelsFirst", "level2/9_ScaledDotProductAttention", "level2/10_DualLinear_SwiGLU"],
    "sft": {
        # evaluation tasks, turn 1 (no skills): copies of each answer; never the fast variant
        "turn1_copies": {"slow": 2, "medium": 2, "wrong": 1},
        # turn 2 after "correct, make it faster" feedback on a slow or medium turn 1: of
        # `turn2_copies` answers, `fast_share` of them the fast variant, the rest the medium one
        "turn2_copies": 5, "fast_share": 0.4,
        # turn 2 after "incorrect" feedback on a wrong turn 1: the medium variant
        "after_wrong": "medium",
        # practice: per kernel, no skill / its own skill / its own skill beside another task's
        "follow": ["no_skill", "own_skill", "own_and_other"],
        # practice summaries: (first, best) = (each slower correct kernel, the fastest), or the
        # one kernel twice for a task with one kernel; the skill's Example is the best kernel
        "selection_per_task": 2,  # one pick of the task's own skills, one "nothing fits"
        "epochs": 100, "lr": 1e-3, "seed": 0,
    },
    "model": MODEL,
    "rl": {
        "turns": 2, "k_schemes": 2, "null_scheme": True, "n_rollouts": 4, "s_summaries": 2,
        "summary_min_speedup": 1.2, "summary_min_gain": 1.2, "verify_min_speedup": 1.2, "verify_min_gain": 1.2,
        "max_new_skills": 2, "library_at_step_0": "empty", "select_mode": "llm",
        "lr": 3e-4, "temperature": 0.5, "gen_batch": 128,
        # per-role generation limits: a selection is a pick of at most 3 names (about 100
        # tokens in the SFT data); a policy reply at most about 800 tokens (the longest
        # evaluation-task variant; the verification re-generation is a policy turn); a summary
        # repeats the best kernel inside a JSON string (up to about 1000 tokens)
        "max_new_tokens": {"selection": 256, "policy": 1024, "summary": 1280},
        # the trainer's options, at their documented defaults (stated, so the protocol says them)
        "dynamic_sampling": False, "normalize_adv": False,
        # verdicts: a policy turn whose source was judged before on its task (the variants
        # judged by `prepare`, or earlier in the arm) takes that verdict; every admission's
        # greedy re-generation is judged anew in a fresh evaluation (rollout verification
        # asks the evaluator for a fresh verdict)
        "verdicts": "policy turns reuse; verification always fresh",
    },
    "arms": {
        "full": {},
        "no_admission": {"skills.verify_min_speedup": 1.0e9},  # no re-generation can reach it
        "frozen": {"rl.lr": 0.0},  # admission on, the weights never move: the in-context effect alone
        "no_joint_training": {"rl.joint_training": False},  # selection and summary turns get no gradient
    },
    "seeds": [0, 1],
    "steps": 8,
    # seconds: `prepare` stops SFT epochs to end within its budget; an arm begins no step
    # that the longest step so far would take past its budget (the rest of the 10-minute
    # device call is process start, evaluator start and the final on/off comparison)
    "budget_s": {"prepare": 510, "arm": 470, "final_reserve": 45},
    "device": {"eval_device": "cuda", "workers_per_gpu": 4, "eval": []},
    # the final library on vs off at turn 1, with the arm's final model
    "final_on_off": {"arms": ["full"], "samples": 8},
    "criteria": {
        "full_admits": "the full arm commits at least one skill in at least one seed",
        "turn1_fast_1.2_beats_no_admission": (
            "at the last step every seed of both arms reached, the full arm's mean turn-1 Fast_1.2 over seeds exceeds "
            "the no-admission arm's by more than the larger of the two arms' spreads (max - min) across seeds"),
        "admitted_skills_picked_more_than_no_joint_training": (
            "the mean over steps and seeds of admitted_share_of_schemes is larger in the full arm than in the "
            "no-joint-training arm"),
    },
}

TINY: dict = copy.deepcopy(PROTOCOL)
TINY.update({
    "name": "coevolution-tiny",
    "eval_tasks": {"level1/3_Softmax": PROTOCOL["eval_tasks"]["level1/3_Softmax"]},
    "practice_tasks": ["level1/7_Cumsum", "level1/10_L2Normalize"],
    "model": TINY_MODEL, "seeds": [0], "steps": 1,
    "budget_s": {"prepare": 0, "arm": 0, "final_reserve": 0},
    # the CPU smoke judges with fewer trials and no perturbed sizes (the interpreter is slow)
    "device": {"eval_device": "cpu", "workers_per_gpu": 1, "eval": ["eval.trials=2", "eval.perturb_shapes=false"]},
    "final_on_off": {"arms": ["full"], "samples": 1},
})
TINY["sft"] = dict(PROTOCOL["sft"], epochs=1)
TINY["rl"] = dict(PROTOCOL["rl"], n_rollouts=2, max_new_tokens={"selection": 16, "policy": 16, "summary": 16},
                 gen_batch=64)


def protocol(tiny: bool = False) -> dict:
    return copy.deepcopy(TINY if tiny else PROTOCOL)


def work_dir(d: Path, arm: str, seed: int) -> Path:
    """The arm x seed's own folder: its suite, library, checkpoints."""
    return Path(d) / "work" / f"{arm}-s{seed}"


def overrides(p: dict, d: Path, arm: str, seed: int) -> list[str]:
    """The dotted overrides of configs/tiny-cpu.yaml shared by every arm (``arm_config``
    then sets the arm's one switch)."""
    r, work = p["rl"], work_dir(d, arm, seed)
    base = [
        f"rl.model=hf:{Path(d) / 'sft' / 'model'}", "rl.env=rollout", f"rl.suite={work / 'suite'}",
        f"rl.steps={p['steps']}", "rl.eval_every=0", "rl.bf16=true", "rl.grad_checkpointing=false",
        "rl.micro_batch_tokens=32768", f"rl.lr={r['lr']}", f"rl.batch_tasks={len(p['eval_tasks'])}",
        "rl.minibatches=1", f"rl.seed={seed}", "rl.save_every=1", "rl.keep_checkpoints=1", "rl.joint_training=true",
        f"rollout.k_schemes={r['k_schemes']}", f"rollout.n_rollouts={r['n_rollouts']}", f"rollout.turns={r['turns']}",
        f"rollout.s_summaries={r['s_summaries']}", f"rollout.summary_min_speedup={r['summary_min_speedup']}",
        f"rollout.summary_min_gain={r['summary_min_gain']}",
        f"rollout.max_new_tokens={max(r['max_new_tokens'].values())}",
        f"rollout.max_new_tokens_selection={r['max_new_tokens']['selection']}",
        f"rollout.max_new_tokens_policy={r['max_new_tokens']['policy']}",
        f"rollout.max_new_tokens_summary={r['max_new_tokens']['summary']}",
        f"rl.dynamic_sampling={str(r['dynamic_sampling']).lower()}", f"rl.normalize_adv={str(r['normalize_adv']).lower()}",
        f"rollout.temperature={r['temperature']}", f"rollout.gen_batch={r['gen_batch']}",
        f"skills.db={work / 'skills.db'}", "skills.seed_library=false", f"skills.select_mode={r['select_mode']}",
        f"skills.verify_min_speedup={r['verify_min_speedup']}", f"skills.verify_min_gain={r['verify_min_gain']}",
        f"skills.max_new_skills={r['max_new_skills']}",
    ] + eval_overrides(p, d) + ["report_to=none", f"out={work}"]
    return base


def eval_overrides(p: dict, d: Path) -> list[str]:
    """The evaluator's settings (shared by `prepare` and every arm). Its own verdict reuse
    stays off: the run's verdict book (``book.py``) reuses, and verification bypasses it."""
    dev = p["device"]
    return [f"eval.device={dev['eval_device']}", "eval.reuse_verdicts=false", "eval.baseline_compile=false",
            f"eval.workers_per_gpu={dev['workers_per_gpu']}", f"eval.cache_dir={Path(d) / 'eval-cache'}",
            *dev["eval"]]


def arm_config(p: dict, d: Path, arm: str, seed: int):
    from davinci_kernel.config import load_config

    if arm not in p["arms"]:
        raise KeyError(arm)
    return load_config(ROOT / "configs" / "tiny-cpu.yaml", overrides(p, d, arm, seed), values=p["arms"][arm])


def recorded(cfg, work: Path, d: Path) -> dict:
    """The full config as run.json keeps it: the arm's folder written as ``{work}``, the run
    folder as ``{dir}`` (so a run folder may move between machines)."""
    import json

    from davinci_kernel.config import to_dict

    text = json.dumps(to_dict(cfg)).replace(str(work), "{work}").replace(str(d), "{dir}")
    return json.loads(text)


def config_diff(a: dict, b: dict) -> dict[str, tuple]:
    """Dotted keys whose values differ between two recorded configs: key -> (a, b)."""
    from davinci_kernel.config import flatten

    fa, fb = flatten(a), flatten(b)
    return {k: (fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)}


def run_plan(p: dict, d: Path) -> dict:
    """run.json: the protocol and, for every arm and seed, its full recorded config."""
    arms = {}
    for seed in p["seeds"]:
        for arm in p["arms"]:
            work = work_dir(d, arm, seed)
            arms[f"{arm}-s{seed}"] = {"arm": arm, "seed": seed,
                                      "config": recorded(arm_config(p, d, arm, seed), work, d)}
    return {"protocol": p, "arms": arms}
