"""The configuration's typed sections: one dataclass per stage.

Covers: ``opt`` (a field's default, ``help`` text, declared ``choices`` and whether it
changes a run's results) and the sections ``EvalConfig``, ``SkillsConfig``,
``RolloutConfig``, ``RewardConfig``, ``RLConfig``, ``SFTConfig`` and the whole ``Config``.
Does not cover: loading, coercing or checking values (``loading.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..errors import UsageError
from ..reward_kinds import REWARDS, kinds_help


class ConfigError(UsageError, ValueError):
    """A configuration value is invalid; the message says which and what is allowed."""


def opt(default, help: str, choices: Optional[tuple] = None, results: bool = True, **kw):
    """A config field: its default, ``help`` text, the allowed ``choices`` (if a choice) and
    whether it changes a run's results (``results=False``: where files go, how many workers, how
    often to save; a ``--resume`` may change those freely)."""
    meta = {"help": help}
    if choices is not None:
        meta["choices"] = choices
    if not results:
        meta["results"] = False
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda d=default: type(d)(d), metadata=meta, **kw)
    return field(default=default, metadata=meta, **kw)


# --------------------------------------------------------------------------- evaluation
@dataclass
class EvalConfig:
    device: str = opt("auto", "cpu, cuda, cuda:N, or auto (cuda when present)")
    trials: int = opt(5, "correctness trials, each with fresh inputs from its own seed")
    atol: float = opt(1e-2, "absolute tolerance of the allclose check")
    rtol: float = opt(1e-2, "relative tolerance of the allclose check")
    seed: int = opt(42, "model init seed (the problem's Model and ModelNew get the same weights)")
    input_seed: Optional[int] = opt(None, "draw the judged inputs (trial seeds, the perturbed size and its seed, the "
                                    "timed checks) from this seed, to replay a verdict (each result's judged_inputs "
                                    "records them); unset = drawn from the OS once per evaluator and task, secret "
                                    "until each call that uses them")
    timing: bool = opt(True, "time candidates (GPU only)")
    timing_iters: int = opt(50, "timed iterations per side (reference and candidate interleaved)")
    timing_max_iters: int = opt(1000, "most timed iterations per side; short kernels get more than timing_iters")
    timing_budget_s: float = opt(0.5, "aim for this much timed work per candidate (iterations grow up to timing_max_iters)")
    timing_placements: int = opt(4, "timed blocks, each on fresh copies of the inputs (other addresses)")
    timing_lead_us: float = opt(-1.0, "GPU busy-wait queued after the L2 flush, before each timed call's start event "
                                "(microseconds): the host has then launched the whole call before timing starts, so "
                                "launch jitter stays out of the event time; 0 = off; -1 = auto (1.5x the host's launch "
                                "time of the slower side, measured in warm-up, at most 250)")
    timing_lead_from: str = opt("reference", "what sizes the automatic lead: 'slower' = the slower side's host launch "
                                "time; 'reference' = the reference's alone, so host work a candidate does before "
                                "its launches returns is timed beyond that lead", choices=("slower", "reference"))
    timing_flush: str = opt("hold", "how the L2 flush and the lead run: 'hold' = one kernel filling every SM, so no "
                            "work on another stream can run beside them (falls back to 'fill' where it cannot be "
                            "built); 'fill' = Tensor.fill_ plus a one-thread torch.cuda._sleep",
                            choices=("hold", "fill"))
    timing_ci_target: float = opt(0.0, "adaptive timing: keep timing more placement blocks until the speedup's 95 % "
                                  "interval is narrower than this relative half-width (0.01 = +/-1 %) or "
                                  "timing_ci_budget_s runs out; each result records the half-width reached "
                                  "(timing_detail.ci); 0 = off, the planned pairs only")
    timing_ci_budget_s: float = opt(10.0, "adaptive timing: most seconds of timed pairs spent reaching "
                                    "timing_ci_target (within eval.run_timeout_s)")
    warmup_iters: int = opt(5, "untimed warm-up calls per side")
    timing_warmup_ms: float = opt(200.0, "untimed calls continue for at least this long before timing, so the GPU "
                                  "clock has left its idle state (it idles at a few hundred MHz); 0 = count only")
    l2_flush_mb: int = opt(256, "size of the buffer written between timed calls")
    baseline_compile: bool = opt(True, "also time a torch.compile baseline (cached)")
    compile_timeout_s: float = opt(180.0, "limit for importing and building a candidate (module-level code, "
                                   "CUDA/Triton builds); > 0 seconds; `dvk eval/bench --timeout` sets it")
    run_timeout_s: float = opt(120.0, "limit for running the checks and timing once built; > 0 seconds; "
                               "`dvk eval/bench --timeout` sets it")
    precision_rel_l2: float = opt(4e-3, "fixed limit: rel-L2 error above this on a float32 output is a precision "
                                  "downgrade where the problem's own calibration cannot tell bf16 from TF32 "
                                  "(chained TF32 matmuls reach ~1.6e-3); float16 the same, bfloat16 16x, float64 "
                                  "2^-16x")
    precision_margin: float = opt(2.0, "calibrated limit: the honest error an output may reach (its dtype's, float32 "
                                  "with TF32), x this (limit = sqrt(margin x that error x the error of operands one "
                                  "step narrower: bf16 for float32/float16, fp8 for bfloat16, float32 for float64))")
    precision_ratio: float = opt(4.0, "calibrated limit: used only where the narrower operands are at least this many "
                                 "times less accurate than honest arithmetic on the problem (else the fixed limit)")
    min_coverage: float = opt(0.1, "coverage below this is 'lazy' (low_coverage): the share of the candidate's "
                                    "executed work (and, on a GPU, of its kernel time) done by its custom kernels")
    implausible_speedup: float = opt(10.0, "speedups above this are re-verified in a fresh worker")
    wall_event_ratio: float = opt(1.5, "synchronized wall time above this x event time flags escaped work")
    perturb_shapes: bool = opt(True, "re-check correctness at perturbed module-level sizes")
    cpu_small_shapes: bool = opt(True, "on CPU use the task's CPU_SHAPES overrides")
    spare_workers: int = opt(-1, "candidate workers started ahead per device beyond one per slot (every candidate "
                             "gets a fresh sandboxed process, so the next ones start while it runs); -1 = one per slot", results=False)
    sandbox: str = opt("auto", "the OS sandbox of candidate workers: 'auto' = all this machine allows (each result's "
                       "`sandbox` says what ran); 'require' = refuse to start without all of it; 'off' = plain "
                       "processes (trusted code only)", choices=("auto", "require", "off"))
    prefork: bool = opt(True, "start each sandboxed candidate worker by forking a parent that has torch, Triton "
                        "and the worker's code imported (tens of milliseconds instead of seconds; where the "
                        "harness runs as root with every namespace); false = a fresh interpreter each",
                        results=False)
    code_policy: str = opt("allowlist", "the static code policy candidates are held to: 'allowlist' = the declared "
                           "subset of Python (docs/policy.md), a violation is policy_violation; 'off' = only the "
                           "specific static checks, which exists only to test the runtime defences in depth",
                           choices=("allowlist", "off"))
    worker_memory_gb: float = opt(-1.0, "host memory limit of one candidate worker (cgroup, or RLIMIT_DATA on CPU "
                                  "workers where no cgroup can be made): GiB; 0 = none; -1 = half the host's memory")
    ref_time_tolerance: float = opt(1.3, "the reference's time beside the candidate may differ from its time in the "
                                    "reference process by at most this factor either way (else reference_slowed "
                                    "or timing_mismatch)")
    self_check: bool = opt(False, "harness self-check: the candidate is the problem's own Model (ModelNew = Model); "
                           "the custom-kernel flags are waived and each result is marked self_check (never a solution)")
    wall_slack: float = opt(0.3, "share of the candidate's reported time that the harness's wall time around the "
                            "timed calls may leave unexplained (plus 0.5 ms a call and 20 ms) before timing_mismatch")
    workers_per_gpu: int = opt(1, "workers per GPU when --workers is not given: they check candidates side by "
                               "side and take turns to time them (the GPU gate)", results=False)
    reuse_verdicts: bool = opt(False, "[O] a source already judged on the same task by this evaluator gets that "
                               "verdict again, not a new evaluation (an RL policy that samples the same kernel "
                               "many times; the same text then always earns the same reward); verdicts of harness "
                               "failures and timeouts are never reused")
    cache_dir: str = opt("~/.cache/davinci_kernel", "baseline and build caches", results=False)


# --------------------------------------------------------------------------- skills
@dataclass
class SkillsConfig:
    db: str = opt("~/.cache/davinci_kernel/skills.db", "SQLite skill library")
    seed_library: bool = opt(True, "[O] import the bundled seed skills (our own, not the paper's or the "
                              "release's) into a new, empty library. True by default for dvk optimize, dvk run "
                              "and dvk skills on a fresh machine, where an empty library leaves the selection "
                              "agent nothing to pick (their --seed/--no-seed flag is this switch); false in every "
                              "training recipe (8B, 14B, tiny-cpu): the release starts RL with an empty library, "
                              "so every skill the policy sees was summarised from its own rollouts and admitted by "
                              "execution. A library that holds skills is used as it is either way", results=False)
    allow_empty_pick: bool = opt(False, "[O] let the selection agent pick fewer than the top k skills, or none "
                                 "(k = min(skills.max_selected, the candidates)); off: it is asked for exactly "
                                 "the top k, as the release's rerank is, and a short, empty or unreadable pick is "
                                 "completed in BM25 order (the turn keeps a parse_error naming the shortfall, so "
                                 "SFT never copies it)")
    select_mode: str = opt("llm", "[P] how skills are chosen: llm = BM25 candidates reranked by the "
                           "selection agent (the method); bm25 = BM25 top skills, no model; none = no "
                           "skills (bm25 and none: the paper's ablations)", choices=("llm", "bm25", "none"))
    bm25_top_k: int = opt(20, "[R] BM25 candidates shown to the selection agent")
    max_selected: int = opt(3, "[R] skills the selection agent may pick")
    verify_min_speedup: float = opt(1.2, "[R] a new skill's verification must reach this speedup")
    verify_min_gain: float = opt(1.2, "[R] ... and this factor over the original turn-1 speedup")
    max_new_skills: int = opt(2, "[R] skills one summary may propose")
    example_solve_check: bool = opt(True, "[O] admission also judges a proposed skill's Example pasted alone as "
                                    "the candidate (when it defines a host function that launches a kernel) on "
                                    "its source task, and refuses the skill if that is correct "
                                    "(example_solves_task): one extra fresh evaluation per such proposal, run "
                                    "beside its verification re-generation")


# --------------------------------------------------------------------------- rollout
@dataclass
class RolloutConfig:
    k_schemes: int = opt(3, "[R] selection samples per task k (plus one null scheme [P])")
    n_rollouts: int = opt(4, "[R] policy rollouts per scheme n")
    turns: int = opt(3, "[R] policy turns per rollout (T)")
    s_summaries: int = opt(8, "[R] summary samples s when the trigger fires (8 in the 14B recipe)")
    summary_min_speedup: float = opt(1.2, "[R] trigger: best-turn speedup at least this")
    summary_min_gain: float = opt(1.2, "[R] trigger: best-turn speedup / turn-1 speedup at least this")
    temperature: float = opt(1.0, "[O] sampling temperature")
    top_p: float = opt(1.0, "[O] nucleus sampling")
    max_new_tokens: int = opt(4096, "[O] generation limit per call; the limit of every role whose own limit "
                              "(max_new_tokens_selection, _summary, _policy) is 0")
    max_new_tokens_selection: int = opt(0, "[R] generation limit of a selection call (1024 in the release and "
                                        "the 8B / 14B recipes); 0 = rollout.max_new_tokens")
    max_new_tokens_summary: int = opt(0, "[R] generation limit of a summary call (2048 in the release and the "
                                      "8B / 14B recipes); 0 = rollout.max_new_tokens")
    max_new_tokens_policy: int = opt(0, "[R] generation limit of a policy turn, and of the greedy re-generation "
                                     "that verifies a skill (the response limit, 8192 in the release and the 8B / "
                                     "14B recipes); 0 = rollout.max_new_tokens")
    gen_batch: int = opt(64, "most sequences the trainer's in-process sampler (rl/local_gen.py) runs at once; "
                             "concurrent task groups are merged up to it", results=False)
    language: str = opt("triton", "[O] kernel language the policy is asked for", choices=("triton", "cuda"))

    def max_new_tokens_for(self, role: str) -> int:
        """The generation limit of one call by ``role`` ("select", "summary", "policy"; a
        verification re-generation is a policy turn): the role's own limit, else max_new_tokens."""
        own = {"select": self.max_new_tokens_selection, "summary": self.max_new_tokens_summary,
               "policy": self.max_new_tokens_policy}[role]
        return own or self.max_new_tokens


# --------------------------------------------------------------------------- rewards
@dataclass
class RewardConfig:
    kind: str = opt("released", "[R] " + kinds_help(), choices=tuple(REWARDS))  # declared in reward_kinds.py
    speedup_cap: float = opt(6.0, "[R] released: cap on the speedup term")
    coverage_weight: float = opt(0.5, "[R] released: weight of the time-coverage term")
    fastp_thresholds: list = opt([1.0, 1.2, 1.5, 2.0], "[P] fastp: speedup thresholds p of Fast_p, one point each")


# --------------------------------------------------------------------------- training
@dataclass
class RLConfig:
    model: str = opt("", "hf:PATH of the backbone (or a tiny:CONFIG for smoke runs)")
    suite: str = opt("builtin", "task suite")
    steps: int = opt(100, "[O] training steps")
    batch_tasks: int = opt(16, "[R] tasks per step")
    lr: float = opt(1e-6, "[R] AdamW learning rate")
    clip_low: float = opt(0.2, "[R] PPO clip, lower")
    clip_high: float = opt(0.28, "[R] PPO clip, upper")
    loss_agg: str = opt("seq-mean-token-sum", "[R] how the token losses of a mini-batch become one loss (a "
                        "sequence is one turn's completion): seq-mean-token-sum = each sequence's token sum, "
                        "averaged over the sequences, divided by rl.loss_scale (the release's; the default, in "
                        "every recipe); token-mean = the mean over all tokens [O]; seq-mean-token-mean = the mean "
                        "over sequences of each one's token mean [O]. Token-sum and token-mean weigh every token "
                        "alike within a batch and differ by a factor mean length / scale per batch, which AdamW "
                        "mostly absorbs (the tiny CPU recipe learns as well with either)",
                        choices=("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"))
    loss_scale: float = opt(1000.0, "[R] seq-mean-token-sum: the per-sequence token sums are divided by this (the "
                            "release: 1000, about the tokens of a typical response); ignored by the other modes")
    grad_clip: float = opt(1.0, "[O] gradient norm clip")
    gamma: float = opt(1.0, "[R] discount over turns")
    group_by: str = opt("task", "[P] TRLOO group: all rollouts of the task [P], or of one scheme (an "
                        "option of the release [R])", choices=("task", "scheme"))
    normalize_adv: bool = opt(False, "[R] divide the policy's advantages by their mean |A| over the task's policy "
                              "turns across all schemes, weighted by tokens (each turn's |A| counts once per "
                              "token of its completion); selection and summary advantages are not rescaled. The "
                              "release's SKILL_ADV_CROSS_SCHEME, on in its skill recipes; off by default here and "
                              "in the 8B / 14B recipes (an option to try)")
    selector_scale: float = opt(0.3, "[R] selector advantage scale")
    summarizer_scale: float = opt(0.5, "[R] summarizer advantage scale")
    joint_training: bool = opt(True, "[P] train all three agents on the shared backbone; false = the "
                               "paper's 'no joint training' ablation: only the policy's loss updates the "
                               "backbone, the selection and summary agents still sample from it (their turns "
                               "keep their rewards, get no gradient)")
    dynamic_sampling: bool = opt(False, "[R] dynamic sampling, as the release does it (on in its recipes and in "
                                 "the 8B / 14B recipes): sample rl.dynamic_oversample times the batch's tasks up "
                                 "front, reject every task group with no reward variance (the standard deviation of "
                                 "its rollouts' summed rewards, over all schemes, at most 1e-6), and fill the batch "
                                 "from the survivors, the step's own tasks first; a batch they cannot fill is trained "
                                 "short; counts in the dynamic/* metrics. Off by default here: it doubles the "
                                 "sampling of a step (the CPU recipe and quick runs); off = every group is kept")
    dynamic_oversample: float = opt(2.0, "[R] dynamic sampling: tasks sampled up front, as a multiple of "
                                    "rl.batch_tasks (each process: its share); at least 1")
    dynamic_max_factor: float = opt(0.0, "[O] dynamic sampling's fallback, off by default (0, as in the "
                                    "release): above rl.dynamic_oversample, a batch the survivors cannot fill is "
                                    "topped up by further rounds of tasks until the step has sampled this many "
                                    "times rl.batch_tasks task groups (dynamic/short counts a gap left at the bound)")
    prs: bool = opt(True, "[P] profiling-based rejection sampling (PRS; its thresholds [R])")
    mismatch: str = opt("reject", "[R] rollout/trainer log-prob mismatch handling",
                        choices=("reject", "tis", "off"))
    lora_r: int = opt(0, "[O] LoRA rank (0 = full fine-tuning)")
    fsdp: bool = opt(False, "with several processes, shard parameters, gradients and optimizer state over them "
                     "(torch FSDP2, one unit per decoder layer) instead of replicating them (DDP); full "
                     "fine-tuning only; ignored in one process", results=False)
    bf16: bool = opt(True, "bf16 weights and compute where supported")
    grad_checkpointing: bool = opt(True, "gradient checkpointing")
    micro_batch_tokens: int = opt(8192, "tokens per micro-batch")
    micro_batch_layout: str = opt("padded", "padded: (B, L) right-padded batches (fused causal attention); "
                                            "packed: one concatenated row (efficient only with flash-attention varlen)",
                                  choices=("padded", "packed"))
    logprob_impl: str = opt("auto", "fused: log-probs straight from the output head's hidden states and weight, "
                            "no logits tensor (plain linear heads only; others fall back to chunked); chunked: the "
                            "model makes the needed logits rows, log-softmax in row chunks; auto: fused, or chunked "
                            "under rl.fsdp (softmax math in Triton kernels on CUDA either way)",
                            choices=("auto", "fused", "chunked"))
    save_every: int = opt(1, "checkpoint every N steps", results=False)
    eval_every: int = opt(10, "validation Fast_p every N steps", results=False)
    seed: int = opt(0, "data order and sampling seed")
    env: str = opt("rollout", "source of task groups: the real rollout, or a synthetic environment "
                   "(smoke runs, tests)", choices=("rollout", "synthetic"))
    minibatches: int = opt(1, "[O] optimizer steps per training step (later ones are off-policy, clipped)")
    tis_cap: float = opt(2.0, "[O] truncated importance sampling cap (mismatch=tis)")
    weight_decay: float = opt(0.0, "[O] AdamW weight decay")
    lora_alpha: int = opt(32, "LoRA alpha")
    keep_checkpoints: int = opt(3, "complete checkpoints kept; older ones are deleted", results=False)
    val_suite: str = opt("", "validation suite for Fast_p every eval_every steps (empty: none)")
    generator: str = opt("local", "who samples the rollouts: the trainer's own decode loop (local), or an "
                         "inference server (vllm, sglang) fed token ids, returning sampled ids and log-probs, "
                         "whose weights are synced after every optimizer step (docs/generation-servers.md)",
                         choices=("local", "vllm", "sglang"))
    generator_url: str = opt("", "base URL of a running generation server (http://HOST:PORT); empty: the trainer "
                             "starts one from rl.generator_python and stops it with the run", results=False)
    generator_python: str = opt("", "Python interpreter of the environment the server is installed in (vLLM and "
                                "SGLang pin their own torch, so they live in a venv of their own); used when "
                                "rl.generator_url is empty", results=False)
    generator_args: str = opt("", "extra command-line arguments for a server the trainer starts (one string, "
                              "split like a shell line), e.g. '--gpu-memory-utilization 0.4'")
    generator_timeout_s: float = opt(300.0, "seconds to wait for a started or given server to become healthy",
                                     results=False)
    generator_sync: str = opt("auto", "how weights reach the server after each step: full (save in the serving "
                              "dtype, pause, reload from disk, reset the prefix cache, resume), lora (hot-load "
                              "the adapter in place), auto (lora when rl.lora_r > 0, else full)",
                              choices=("auto", "full", "lora"))
    generator_dtype: str = opt("auto", "the serving dtype, in which synced weights are saved and the server is "
                               "started: auto = bfloat16 with rl.bf16 on a GPU, else float32 (serve in the dtype "
                               "the trainer scores in, or mismatch rejection keeps nothing)",
                               choices=("auto", "float32", "bfloat16", "float16"))


@dataclass
class SFTConfig:
    model: str = opt("", "hf:PATH of the base model")
    data: list = opt([], "JSONL conversation files, run dirs, or hf:NAME datasets")
    lr: float = opt(2e-5, "[R] learning rate")
    epochs: int = opt(4, "[R] epochs")
    max_seconds: float = opt(0.0, "stop early rather than run past this many seconds: no epoch is begun that the "
                             "longest epoch so far would take past it (0 = no limit); the model is saved either way", results=False)
    max_per_task: int = opt(8, "[O] diversity filter: samples kept per task and role")
    minhash_threshold: float = opt(0.85, "[O] diversity filter: Jaccard at or above this is a near duplicate "
                                "(code, picks, or one proposed skill)")
    dedupe: bool = opt(True, "[O] diversity filter: drop near-duplicate answers; false keeps them (a curated "
                       "set that gives one answer under several prompts on purpose)")
    max_seq_len: int = opt(8192, "tokens per micro-batch (and the longest example kept whole)")
    micro_batch_layout: str = opt("padded", "padded: (B, L) right-padded batches; packed: concatenated rows",
                                  choices=("padded", "packed"))
    lora_r: int = opt(0, "LoRA rank (0 = full fine-tuning)")
    seed: int = opt(0, "seed")
    batch_rows: int = opt(4, "micro-batches of max_seq_len tokens per optimizer step")
    clusters: int = opt(0, "[O] diversity filter: k-means clusters over code features, per role (0 = off)")
    max_per_cluster: int = opt(0, "[O] diversity filter: samples kept per cluster (0 = no cap)")
    bf16: bool = opt(True, "bf16 compute where supported")
    grad_checkpointing: bool = opt(True, "gradient checkpointing")


@dataclass
class Config:
    eval: EvalConfig = field(default_factory=EvalConfig)
    skills: SkillsConfig = field(default_factory=SkillsConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    out: str = opt("runs/latest", "output directory", results=False)
    report_to: str = opt("tensorboard", "where training metrics go besides OUT/metrics.jsonl: tensorboard (OUT/tb), "
                         "wandb (Weights & Biases; WANDB_PROJECT, WANDB_MODE as usual), mlflow (MLFLOW_TRACKING_URI, "
                         "else OUT/mlruns) or none; the library is imported only when chosen",
                         choices=("tensorboard", "wandb", "mlflow", "none"), results=False)
