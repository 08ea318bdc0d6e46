"""The co-evolution experiment's protocol (version 2), committed before any GPU run, and each
arm's config.

``PROTOCOL`` holds everything that decides the outcome, fixed before the first arm runs:

- three disjoint task sets: ``practice_tasks`` (SFT only), ``rl_tasks`` (the loop trains on
  them: task -> its variant roles and technique) and ``heldout_tasks`` (never in SFT or RL,
  judged only in evaluation: task -> roles, technique and its ``sibling`` RL task); each
  held-out task's fast form needs the technique its sibling's fast form uses;
- the ``techniques`` (ids of ``bench/coevo/techniques.py``) and the ``practice_pairs`` that
  teach applying each of them (task -> technique, ``lacking`` and ``with`` kernels);
- the ``distractors`` every arm's library starts from (``bench/coevo/distractors.jsonl``);
- the ``margin_rule`` (p 1.2, m 1.3: ``fast`` >= p*m eager, ``slow``/``medium`` <= p/m,
  ``wrong`` incorrect), enforced: ``prepare``, ``probe`` and ``arm`` start nothing on a
  machine whose role checks fail (``roles.py``);
- the SFT mix, the model, the RL settings (the release's trainer options where the base
  has them: ``guarded``), the ``probe`` and its go/no-go thresholds, the arms (each one
  switch away from ``full``), the seeds per arm, the steps, the time budgets, the final
  evaluation (>= 64 samples per held-out task at turn 1) and the pre-registered ``tests``
  (a)-(e) with their margins and failure conditions.

The roles of a task's variants are resolved once from the variant manifests (``resolve``):
``bench/coevo/variants/manifest.json`` (a ``role`` and ``technique`` per variant) over the
defaults written here for the built-in RL tasks whose variants exist already. ``TINY`` is
the CPU smoke's version (same keys; a tiny model; one RL task, one held-out task and one
practice pair made of existing variants, since no claim rests on it; the margin rule is
not enforced there: a CPU times nothing). ``arm_config`` turns (protocol, arm, seed) into
the trainer's ``Config``; ``recorded`` is that config as ``run.json`` keeps it;
``version_difference`` names how a run folder's protocol differs from this one.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from kernel_variants import MODEL_SHAPE, TINY_SHAPE

ROOT = Path(__file__).resolve().parents[2]
COEVO = ROOT / "bench" / "coevo"
VARIANT_DIRS = (ROOT / "bench" / "learning" / "variants", ROOT / "bench" / "learning" / "extra_variants",
                COEVO / "variants")
TASK_DIR = COEVO / "tasks"  # the new tasks (KernelBench format), named like the built-in ones
DISTRACTORS = COEVO / "distractors.jsonl"

MODEL, TINY_MODEL = MODEL_SHAPE, TINY_SHAPE  # 4.0M parameters, 15.3 MiB in float32; a CPU-sized one

ARMS = ("full", "frozen", "no_admission", "no_joint_training")
ROLES = ("slow", "medium", "fast", "wrong")
VERSION = 2

# every built-in task (davinci_kernel/tasks/builtin): those not RL or held-out are practice
BUILTIN = [
    "level1/1_Matmul", "level1/2_BatchedMatmul", "level1/3_Softmax", "level1/4_LayerNorm", "level1/5_RMSNorm_FP16",
    "level1/6_CrossEntropy", "level1/7_Cumsum", "level1/8_MeanReduction", "level1/9_DepthwiseConv2d",
    "level1/10_L2Normalize", "level2/1_Linear_Bias_GELU", "level2/2_Linear_Scale_Residual_LayerNorm",
    "level2/3_Matmul_Scale_Softmax", "level2/4_Conv2d_BiasAdd_ReLU_MaxPool", "level2/5_Swish_Scale_Clamp_Residual",
    "level2/6_RMSNorm_SiLU_Gate", "level2/7_GroupNorm_SiLU_Residual", "level2/8_LayerNorm2d_ChannelsFirst",
    "level2/9_ScaledDotProductAttention", "level2/10_DualLinear_SwiGLU", "level3/1_PreNorm_MLP_Block",
    "level3/2_MultiHeadSelfAttention", "level3/3_ResNet_BasicBlock", "level3/4_RMSNorm_SwiGLU_FFN"]

PROTOCOL: dict = {
    "name": "coevolution",
    "version": VERSION,
    "techniques": ["fuse_elementwise_chain", "gemm_tile128_fused_epilogue", "one_pass_row_reduction"],
    # RL tasks: trained on. Roles None: from bench/coevo/variants/manifest.json. Eager
    # speedups on the H200 (bench/results/learning_run_h200.json): Swish slow_block32 0.60,
    # fused_block4096 5.6; Linear_Bias_GELU slow_tile16 0.53, fused_tile128 4.6; the
    # RMSNorm_SiLU_Gate variants of bench/learning are too fast for slow/medium (3.1, 3.46),
    # so its roles are the new variants of bench/coevo/variants.
    "rl_tasks": {
        "level2/5_Swish_Scale_Clamp_Residual": {
            "technique": "fuse_elementwise_chain",
            "roles": {"slow": "slow_unfused_block32", "medium": "slow_block32", "fast": "fused_block4096",
                      "wrong": ["wrong_missing_residual", "wrong_clamp_before_scale"]}},
        "level2/1_Linear_Bias_GELU": {
            "technique": "gemm_tile128_fused_epilogue",
            "roles": {"slow": "slow_tile16_unfused", "medium": "slow_tile16", "fast": "fused_tile128",
                      "wrong": ["wrong_bias_row_index", "wrong_gelu_no_half"]}},
        "level2/6_RMSNorm_SiLU_Gate": {"technique": "one_pass_row_reduction", "roles": None},
    },
    # held-out tasks (bench/coevo/tasks): never in SFT or RL; judged only in evaluation
    "heldout_tasks": {
        "level2/11_HardSwish_Bias_Scale_Residual": {"technique": "fuse_elementwise_chain",
                                                    "sibling": "level2/5_Swish_Scale_Clamp_Residual", "roles": None},
        "level2/12_Linear_Bias_SiLU": {"technique": "gemm_tile128_fused_epilogue",
                                       "sibling": "level2/1_Linear_Bias_GELU", "roles": None},
        "level2/13_RMSNorm_Sigmoid_Scale": {"technique": "one_pass_row_reduction",
                                            "sibling": "level2/6_RMSNorm_SiLU_Gate", "roles": None},
    },
    # practice tasks (SFT only): every other built-in task, plus the new practice tasks of
    # bench/coevo/variants/manifest.json (those with `lacking`/`with` variants, most of them
    # the practice families of bench/coevo/family.py: 4-6 tasks per technique whose pairs
    # differ only in the epilogue the forward names); filled by `resolve`
    "practice_tasks": None,
    # (lacking, with) pairs of correct kernels that teach applying a technique given in a
    # skill; the manifest's pairs (role lacking/with, its technique) are added by `resolve`
    "practice_pairs": {
        "level1/3_Softmax": {"technique": "one_pass_row_reduction", "lacking": ["two_pass", "slow_block32"],
                             "with": "fused_one_pass"},
        "level1/4_LayerNorm": {"technique": "one_pass_row_reduction", "lacking": ["two_pass", "slow_block64"],
                               "with": "fused_one_pass"},
        "level1/10_L2Normalize": {"technique": "one_pass_row_reduction", "lacking": ["two_pass", "slow_block64"],
                                  "with": "fused_one_pass"},
        "level3/4_RMSNorm_SwiGLU_FFN": {"technique": "gemm_tile128_fused_epilogue",
                                        "lacking": ["slow_tile16", "unfused_tile64"], "with": "fused_tile128"},
    },
    "from_manifest": True,
    "distractors": "bench/coevo/distractors.jsonl",
    # the role margin, enforced before prepare's SFT, a probe or an arm starts (roles.py):
    # fast >= p*m = 1.56x eager, slow and medium <= p/m = 0.923x, wrong judged incorrect; a
    # record is valid for the card kind and the UTC day it was measured on
    "margin_rule": {"p": 1.2, "m": 1.3, "fast_min": 1.56, "slow_medium_max": 0.923, "enforce": True,
                    "valid_for": "card kind and UTC day"},
    "sft": {
        # RL tasks, turn 1 (no skills): copies of each answer; never the fast variant
        "rl_turn1_copies": {"slow": 2, "medium": 2, "wrong": 1},
        # turn 2 after "correct, make it faster" on a slow or medium turn 1: of `rl_turn2_copies`
        # answers, `fast_share` the fast variant, the rest the medium one
        "rl_turn2_copies": 5, "fast_share": 0.4,
        "after_wrong": "medium",  # turn 2 after "incorrect" on a wrong turn 1
        # practice pairs, per lacking kernel: the technique skill in the system prompt (alone,
        # beside a distractor, or with the lacking kernel given in the user message) -> the
        # kernel with it; no skill -> the lacking kernel
        "apply_copies": {"skill_alone": 4, "skill_and_distractor": 3, "given_lacking": 2, "no_skill": 1},
        # per lacking kernel: summary of lacking -> with, the technique skill; every other copy
        # lists the whole distractor library as the existing skills (as the probe's and the
        # arms' summary prompts do), the rest a random part of it (probe 1: rows listing 0-3
        # names taught a summary that breaks on the 6-name list, 1 pass in 48; see
        # docs/coevolution.md)
        "summary_copies": 6,
        "select_per_pair": 3,  # the technique skill among distractors and the other techniques' skills
        "select_candidates": [3, 5],
        "reference_copies": 1,  # practice tasks without a pair: turn 1 -> the built-in reference
        "min_pairs": 2,  # practice tasks with a (lacking, with) pair, per technique
        # epochs: probe 1 had 100 over 154 rows (2100 steps), probe 2 60 over 469 (4020 steps),
        # probe 3 50 over 659 (stopped by the prepare budget after 46: 4324 steps, 122 s on an
        # H100, loss 3e-5); the families' apply-only grid (family.py) brings about 1200 rows,
        # so 30 epochs are about 5000 steps
        "epochs": 30, "lr": 1e-3, "seed": 0,
    },
    "model": MODEL,
    "rl": {
        "turns": 2, "k_schemes": 2, "null_scheme": True, "n_rollouts": 4, "s_summaries": 2,
        "summary_min_speedup": 1.2, "summary_min_gain": 1.2, "verify_min_speedup": 1.2, "verify_min_gain": 1.2,
        "max_new_skills": 2, "library_at_step_0": "distractors", "select_mode": "llm",
        # one pick per scheme: the rerank's top k is then the top 1, so a scheme holds the
        # helpful skill only when selection ranks it over the distractors (test e)
        "max_selected": 1,
        "lr": 3e-4, "temperature": 0.5, "gen_batch": 128,
        # a selection is a pick of at most 3 names; a policy reply at most about 800 tokens; a
        # technique skill's Example is a snippet, not a whole kernel (about 400 tokens)
        "max_new_tokens": {"selection": 256, "policy": 1024, "summary": 1024},
        # the release's trainer options (GAIR-NLP/daVinci-kernel): set where the base config
        # has the key, listed under `trainer_applied` in run.json's protocol otherwise absent
        "trainer": {"rl.loss_agg": "seq-mean-token-sum", "rl.loss_scale": 1000.0, "rl.normalize_adv": True,
                    "rl.dynamic_sampling": True},
        "verdicts": "policy turns reuse; verification always fresh",
    },
    "arms": {
        "full": {},
        "frozen": {"rl.lr": 0.0},  # admission on, the weights never move: the in-context effect alone
        "no_admission": {"skills.verify_min_speedup": 1.0e9},  # no re-generation can reach it
        "no_joint_training": {"rl.joint_training": False},  # selection and summary turns get no gradient
    },
    "seeds": {"full": [0, 1, 2], "frozen": [0, 1, 2], "no_admission": [0, 1, 2], "no_joint_training": [0, 1]},
    "steps": 8,
    # seconds from process start: prepare stops SFT epochs to end within its budget; an arm
    # begins no step that the longest so far would take past its budget less the final
    # evaluation's reserve
    "budget_s": {"prepare": 510, "arm": 470, "final_reserve": 110},
    "device": {"eval_device": "cuda", "workers_per_gpu": 4, "eval": []},
    # after the last step, on every held-out task at turn 1: every arm with its final library
    # (the selection agent sampled per sample), the full arm also without skills
    "final_eval": {"samples": 64, "on": list(ARMS), "off": ["full"]},
    # during the arm, every `every` steps (and at the last): held-out turn 1 with the library
    "step_heldout": {"every": 2, "samples": 8},
    # after SFT, before any arm; go/no-go fixed here before it runs; with `required`, an arm
    # starts only when the run folder's last probe said go
    "probe": {
        "summaries": 16, "noskill_samples": 64, "required": True,
        "go": {"summary_share_min": 0.25, "greedy_with_skill_fast": True, "noskill_fast_share_max": 0.2,
               "rl_tasks_go_min": 2},
        "rule": ("an RL task goes when at least summary_share_min of its slow->fast summaries parse, pass the "
                 "admission filter and carry its technique, a greedy turn 1 with the first such skill on its "
                 "held-out sibling is correct and faster than p, and at most noskill_fast_share_max of the no-skill "
                 "turn-1 samples on the sibling are; the probe goes when at least rl_tasks_go_min RL tasks go"),
    },
    "bootstrap": {"resamples": 2000, "seed": 0, "level": 0.95,
                  "how": "seeds drawn with replacement, then samples within each drawn seed and task"},
    # pre-registered: each test's statistic, margin and the outcome that counts as failure
    "tests": {
        "a_full_admits": {
            "statistic": "seeds of the full arm that admitted at least one skill (distractors excluded)",
            "margin": 2, "pass": "at least 2 of the 3 seeds", "fail": "fewer than 2 seeds admit a skill"},
        "b_transfer": {
            "statistic": ("held-out turn-1 Fast_1.2 of the full arm's final model with its final library minus the "
                          "same model without skills"),
            "margin": 0.10, "pass": "difference >= margin and the CI's lower end > 0",
            "fail": "difference < margin, or the CI reaches 0"},
        "c_full_vs_no_admission": {
            "statistic": "held-out turn-1 Fast_1.2 with the final library: full minus no_admission",
            "margin": 0.10, "pass": "difference >= margin and the CI's lower end > 0",
            "fail": "difference < margin, or the CI reaches 0"},
        "d_full_vs_frozen": {
            "statistic": "held-out turn-1 Fast_1.2 with the final library: full minus frozen (what RL adds)",
            "margin": 0.05, "pass": "difference >= margin and the CI's lower end > 0",
            "fail": "difference < margin, or the CI reaches 0"},
        "e_selection": {
            "statistic": ("share of held-out selections that pick an admitted skill carrying the task's technique "
                          "(over the distractors), over seeds whose library holds one: full minus no_joint_training"),
            "margin": 0.10, "pass": "difference >= margin and the CI's lower end > 0",
            "fail": "difference < margin, the CI reaches 0, or an arm has no seed whose library holds such a skill"},
    },
}

TINY: dict = copy.deepcopy(PROTOCOL)
TINY.update({
    "name": "coevolution-tiny",
    "rl_tasks": {"level1/3_Softmax": {"technique": "one_pass_row_reduction", "roles": {
        "slow": "slow_block32", "medium": "two_pass", "fast": "fused_one_pass",
        "wrong": ["wrong_exp2_unscaled", "wrong_load_unmasked"]}}},
    "heldout_tasks": {"level1/4_LayerNorm": {"technique": "one_pass_row_reduction", "sibling": "level1/3_Softmax",
                                             "roles": {"slow": "slow_block64", "medium": "two_pass",
                                                       "fast": "fused_one_pass",
                                                       "wrong": ["wrong_count_block", "wrong_missing_bias"]}}},
    "practice_tasks": ["level1/10_L2Normalize", "level1/7_Cumsum"],
    "practice_pairs": {"level1/10_L2Normalize": {"technique": "one_pass_row_reduction", "lacking": ["two_pass"],
                                                 "with": "fused_one_pass"}},
    "from_manifest": False,
    "margin_rule": dict(PROTOCOL["margin_rule"], enforce=False),  # a CPU times nothing
    "model": TINY_MODEL, "seeds": {a: [0] for a in ARMS}, "steps": 1,
    "budget_s": {"prepare": 0, "arm": 0, "final_reserve": 0},
    "device": {"eval_device": "cpu", "workers_per_gpu": 1, "eval": ["eval.trials=2", "eval.perturb_shapes=false"]},
    "final_eval": {"samples": 2, "on": list(ARMS), "off": ["full"]},
    "step_heldout": {"every": 1, "samples": 1},
    "probe": dict(PROTOCOL["probe"], summaries=2, noskill_samples=2, required=False),  # a tiny model: no-go
    "bootstrap": dict(PROTOCOL["bootstrap"], resamples=200),
})
TINY["sft"] = dict(PROTOCOL["sft"], epochs=1, min_pairs=1)
TINY["techniques"] = ["one_pass_row_reduction"]
TINY["rl"] = dict(PROTOCOL["rl"], n_rollouts=2, max_new_tokens={"selection": 16, "policy": 16, "summary": 16},
                 gen_batch=64, trainer={"rl.normalize_adv": True, "rl.dynamic_sampling": False})


# ----------------------------------------------------------------------------- resolving
def _coevo_manifest() -> dict[str, list[dict]]:
    path = COEVO / "variants" / "manifest.json"
    return json.loads(path.read_text())["tasks"] if path.is_file() else {}


def _coevo_techniques() -> dict[str, dict]:
    """technique -> its manifest sets (rl_task, held_out_task, practice_tasks, apply_only_tasks)."""
    path = COEVO / "variants" / "manifest.json"
    return json.loads(path.read_text())["techniques"] if path.is_file() else {}


def _roles_of(variants: list[dict]) -> dict | None:
    """{slow, medium, fast, wrong: [...]} from a manifest's ``role`` fields, or None."""
    out: dict = {"wrong": []}
    for v in variants:
        role = v.get("role")
        if role == "wrong":
            out["wrong"].append(v["name"])
        elif role in ROLES:
            out[role] = v["name"]
    return out if all(r in out for r in ("slow", "medium", "fast")) and out["wrong"] else None


def _pair_of(variants: list[dict]) -> dict | None:
    lacking = [v["name"] for v in variants if v.get("role") == "lacking" or
               (v.get("role") is None and v["name"].startswith("lacking_"))]
    with_ = [v for v in variants if v.get("role") == "with" or (v.get("role") is None and v["name"].startswith("with_"))]
    if not lacking or not with_:
        return None
    return {"technique": with_[0].get("technique"), "lacking": lacking, "with": with_[0]["name"]}


def resolve(p: dict, manifest: dict | None = None) -> dict:
    """The protocol with every role named: roles left None come from the coevo manifest
    (its own roles win there too); practice pairs and tasks completed from it."""
    p = copy.deepcopy(p)
    man = _coevo_manifest() if manifest is None else manifest
    for key in ("rl_tasks", "heldout_tasks"):
        for task, spec in p[key].items():
            got = _roles_of(man.get(task, [])) if spec["roles"] is None or p["from_manifest"] else None
            if got is not None:
                spec["roles"] = got
    named = set(p["rl_tasks"]) | set(p["heldout_tasks"])
    if p["from_manifest"]:
        apply_only = {t for spec in _coevo_techniques().values() for t in spec.get("apply_only_tasks", [])} \
            if manifest is None else set()
        for task, vs in man.items():
            pair = _pair_of(vs)
            if pair is not None and task not in named:
                p["practice_pairs"][task] = dict(pair, apply_only=True) if task in apply_only else pair
    if p["practice_tasks"] is None:
        extra = [t for t in p["practice_pairs"] if t not in BUILTIN]
        p["practice_tasks"] = [t for t in BUILTIN if t not in named] + sorted(extra)
    return p


def protocol(tiny: bool = False) -> dict:
    return resolve(TINY if tiny else PROTOCOL)


def all_seeds(p: dict) -> list[tuple[str, int]]:
    """Every (arm, seed) of the protocol, seed-major (one seed's arms together)."""
    seeds = sorted({s for ss in p["seeds"].values() for s in ss})
    return [(a, s) for s in seeds for a in ARMS if a in p["arms"] and s in p["seeds"][a]]


def version_difference(old: dict, new: dict) -> str | None:
    """None when a run folder's protocol is this one, else what differs (version first)."""
    if old.get("version", 1) != new.get("version"):
        return f"protocol version {old.get('version', 1)} (this is version {new.get('version')})"
    for k in sorted(set(old) | set(new)):
        if old.get(k) != new.get(k):
            return f"the protocol's '{k}' differs"
    return None


# ----------------------------------------------------------------------------- configs
def work_dir(d: Path, arm: str, seed: int) -> Path:
    """The arm x seed's own folder: its suite, library, checkpoints."""
    return Path(d) / "work" / f"{arm}-s{seed}"


def trainer_options(p: dict) -> dict:
    """The release's trainer options that this base's config has (the others wait for it)."""
    from davinci_kernel.config import Config, flatten, to_dict

    have = set(flatten(to_dict(Config())))
    return {k: v for k, v in p["rl"]["trainer"].items() if k in have}


def _text(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def overrides(p: dict, d: Path, arm: str, seed: int) -> list[str]:
    """The dotted overrides of configs/tiny-cpu.yaml shared by every arm (``arm_config``
    then sets the arm's one switch)."""
    r, work = p["rl"], work_dir(d, arm, seed)
    return [
        f"rl.model=hf:{Path(d) / 'sft' / 'model'}", "rl.env=rollout", f"rl.suite={work / 'suite'}",
        f"rl.steps={p['steps']}", "rl.eval_every=0", "rl.bf16=true", "rl.grad_checkpointing=false",
        "rl.micro_batch_tokens=32768", f"rl.lr={r['lr']}", f"rl.batch_tasks={len(p['rl_tasks'])}",
        "rl.minibatches=1", f"rl.seed={seed}", "rl.save_every=1", "rl.keep_checkpoints=1", "rl.joint_training=true",
        f"rollout.k_schemes={r['k_schemes']}", f"rollout.n_rollouts={r['n_rollouts']}", f"rollout.turns={r['turns']}",
        f"rollout.s_summaries={r['s_summaries']}", f"rollout.summary_min_speedup={r['summary_min_speedup']}",
        f"rollout.summary_min_gain={r['summary_min_gain']}",
        f"rollout.max_new_tokens={max(r['max_new_tokens'].values())}",
        f"rollout.max_new_tokens_selection={r['max_new_tokens']['selection']}",
        f"rollout.max_new_tokens_policy={r['max_new_tokens']['policy']}",
        f"rollout.max_new_tokens_summary={r['max_new_tokens']['summary']}",
        f"rollout.temperature={r['temperature']}", f"rollout.gen_batch={r['gen_batch']}",
        f"skills.db={work / 'skills.db'}", "skills.seed_library=false", f"skills.select_mode={r['select_mode']}",
        f"skills.verify_min_speedup={r['verify_min_speedup']}", f"skills.verify_min_gain={r['verify_min_gain']}",
        f"skills.max_new_skills={r['max_new_skills']}", f"skills.max_selected={r['max_selected']}",
        *(f"{k}={_text(v)}" for k, v in trainer_options(p).items()),
    ] + eval_overrides(p, d) + ["report_to=none", f"out={work}"]


def eval_overrides(p: dict, d: Path) -> list[str]:
    """The evaluator's settings (shared by `prepare`, the probe and every arm). Its own
    verdict reuse stays off: the run's verdict book (``book.py``) reuses, and verification
    bypasses it."""
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
    from davinci_kernel.config import to_dict

    text = json.dumps(to_dict(cfg)).replace(str(work), "{work}").replace(str(d), "{dir}")
    return json.loads(text)


def config_diff(a: dict, b: dict) -> dict[str, tuple]:
    """Dotted keys whose values differ between two recorded configs: key -> (a, b)."""
    from davinci_kernel.config import flatten

    fa, fb = flatten(a), flatten(b)
    return {k: (fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)}


def run_plan(p: dict, d: Path) -> dict:
    """run.json: the protocol (with the trainer options applied) and, for every arm and
    seed, its full recorded config."""
    arms = {}
    for arm, seed in all_seeds(p):
        work = work_dir(d, arm, seed)
        arms[f"{arm}-s{seed}"] = {"arm": arm, "seed": seed, "config": recorded(arm_config(p, d, arm, seed), work, d)}
    return {"protocol": recorded_protocol(p), "arms": arms}


def recorded_protocol(p: dict) -> dict:
    """The protocol as run.json and the results keep it (with the trainer options applied)."""
    return json.loads(json.dumps(dict(p, trainer_applied=sorted(trainer_options(p)))))
