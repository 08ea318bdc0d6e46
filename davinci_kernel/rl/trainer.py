"""The RL training loop of daVinci-kernel (multi-turn REINFORCE with TRLOO).

Each step: take the next batch of tasks (deterministic order) → every process collects
task groups for its share of them with the model being trained (selection, policy
turns, summaries) → rewards → per-agent advantages → PRS → with ``rl.dynamic_sampling``,
tasks oversampled up front and groups without reward variance rejected (``dynamic.py``) → one update of
the shared backbone (``update.py``) → commit the skills staged during the step → log →
checkpoint. Reward metrics cover every group sampled in the step; ``samples`` and the
update's metrics the groups trained on.
With ``rl.joint_training`` off (the paper's "no joint training" ablation) only policy turns
reach the update: selection and summary turns are still sampled from the shared backbone
and keep their rewards, but get advantage 0 and so become no samples (``policy_only``).

Covers: process setup through accelerate (one process, or DDP on CPU/GPU) or fully
sharded over the processes (``rl.fsdp``: torch FSDP2, ``sharding.py``; checkpoints hold the
gathered model and name-keyed optimizer state, so a run may resume with or without it),
resume from the newest complete checkpoint (a broken one is skipped with a warning),
metrics and TensorBoard, and validation Fast_p per level every ``eval_every`` steps.

Does not cover: the math (``rollout/rewards.py``, ``advantages.py``, ``rejection.py``,
``losses.py``), where task groups come from (``env.py``), or SFT (``sft.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import shutil
import time
from pathlib import Path
from typing import Optional

import torch

from ..config import Config, to_dict
from ..errors import UsageError
from ..llm.spec import resolve_model
from ..records import TaskGroup
from ..rollout.rewards import fill_rewards
from ..rundir import RunDir
from . import checkpoint as ckpt
from .advantages import fill_advantages
from .data import TaskSampler
from .dynamic import Collected, collect_step
from .env import Env, make_env
from .local_gen import LocalGenerator
from .metrics_log import MetricsLog
from .modeling import is_adapter_dir, load_model, load_tokenizer, mixed_precision, save_model, trainable_parameters
from .progress import bar as progress_bar
from .rejection import apply_prs
from .sequences import build_samples, group_turns
from .sharding import full_state, gathered, load_optimizer, names_keyed, shard_model
from .update import UpdateSettings, update

log = logging.getLogger("davinci_kernel.rl")


def _seed_all(seed: int) -> None:
    import numpy as np

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def policy_only(group: TaskGroup) -> TaskGroup:
    """Joint training off: selection and summary turns keep their rewards (logged) and get
    advantage 0, so ``build_samples`` makes no samples of them and only the policy's loss
    updates the backbone (the loss, ``rl.loss_agg``, is then over policy tokens alone)."""
    for t in list(group.selections) + list(group.summaries):
        t.advantage = 0.0
    return group


def prepare_group(g: TaskGroup, cfg: Config, prs_rng: random.Random) -> int:
    """Rewards, per-agent advantages (policy only when ``rl.joint_training`` is off) and PRS
    for one task group, in place; returns the turns PRS dropped."""
    r = cfg.rl
    fill_rewards(g, cfg.reward)
    fill_advantages(g, r.gamma, r.group_by, r.normalize_adv, r.selector_scale, r.summarizer_scale)
    if not r.joint_training:
        policy_only(g)
    return apply_prs([t for e in g.episodes for t in e.turns], prs_rng) if r.prs else 0


class RLTrainer:
    """``RLTrainer(cfg, out, resume).run()``; ``env`` may be given (tests, custom environments)."""

    def __init__(self, cfg: Config, out: Optional[str | Path] = None, resume: bool = False,
                 env: Optional[Env] = None, accelerator=None, echo=None):
        from accelerate import Accelerator

        self.cfg = cfg
        self.out = Path(out or cfg.out)
        self.echo = echo or (lambda msg: None)
        self.env = env if env is not None else make_env(cfg, self.out)  # bad env input fails before loading
        self.acc = accelerator or Accelerator(mixed_precision=mixed_precision(cfg.rl.bf16),
                                              cpu=not torch.cuda.is_available())
        self.rank, self.world = self.acc.process_index, self.acc.num_processes
        self.main = self.acc.is_main_process
        self.fsdp = cfg.rl.fsdp and self.world > 1
        self.ck_root = self.out / "checkpoints"
        if self.main:
            self.ck_root.mkdir(parents=True, exist_ok=True)
            ckpt.cleanup_tmp(self.ck_root)
        _seed_all(cfg.rl.seed * 1000 + self.rank)
        if self.main:
            self.base = resolve_model(cfg.rl.model, self.out)
        self.acc.wait_for_everyone()
        if not self.main:
            self.base = resolve_model(cfg.rl.model, self.out)
        self.start_step, state, found = self._load(resume)
        self.sampler = TaskSampler(self.env.train_tasks(), cfg.rl.batch_tasks, cfg.rl.seed)
        if state is not None:
            self.env.restore(state.get("skills", {}))
        self.settings = UpdateSettings.from_config(cfg)
        self.log = MetricsLog(self.out, report_to=cfg.report_to, resume_step=self.start_step if found else None,
                              config=to_dict(cfg)) if self.main else None
        if self.main:
            (self.out / "config.json").write_text(json.dumps(to_dict(cfg), indent=2))
            evaluator = getattr(self.env, "evaluator", None)
            RunDir(self.out).start({"kind": "train rl", "rl_model": cfg.rl.model, "env": cfg.rl.env},
                                   sandbox=getattr(evaluator, "sandbox_description", None) or "none (no evaluator)")
        self.server = None  # a ServerRollouts when rl.generator is a server
        if cfg.rl.generator != "local":
            from .server_rollouts import ServerRollouts

            if self.world > 1:
                raise UsageError(f"rl.generator={cfg.rl.generator} runs with one trainer process for now; "
                                 "launch without --num_processes (or use rl.generator=local)")
            self.server = ServerRollouts.open(cfg, self.base, self.out, self._bare(), self.tokenizer,
                                              version=self.start_step, echo=self.echo)

    # ------------------------------------------------------------------ loading
    def _load(self, resume: bool):
        """Model + optimizer, from the newest usable checkpoint when resuming."""
        bad: list[int] = []
        while resume:
            found = ckpt.latest_complete(self.ck_root, skip=tuple(bad))
            if found is None:
                log.warning("no complete checkpoint under %s; starting from step 0", self.ck_root)
                break
            step, path = found
            try:
                state = self._build(path)
                self.echo(f"resumed from {path} (step {step})")
                return step, state, True
            except Exception as e:  # a checkpoint whose files cannot be read
                log.warning("checkpoint %s could not be loaded (%s); trying the previous one", path, e)
                bad.append(step)
        self._build(None)
        return 0, None, False

    def _build(self, path: Optional[Path]):
        r = self.cfg.rl
        state = None
        if path is not None:
            state = json.loads((path / "trainer_state.json").read_text())
            mdir = path / "model"
            if is_adapter_dir(mdir):
                model = load_model(self.base, bf16=r.bf16, grad_checkpointing=r.grad_checkpointing, adapter=mdir)
            else:
                model = load_model(mdir, bf16=r.bf16, grad_checkpointing=r.grad_checkpointing)
            self.tokenizer = load_tokenizer(mdir)
        else:
            model = load_model(self.base, lora_r=r.lora_r, lora_alpha=r.lora_alpha, bf16=r.bf16,
                               grad_checkpointing=r.grad_checkpointing)
            self.tokenizer = load_tokenizer(self.base)
        model.train()
        names = [n for n, p in model.named_parameters() if p.requires_grad]  # the optimizer's order
        if self.fsdp:
            model = shard_model(model.to(self.acc.device), bf16=mixed_precision(r.bf16) == "bf16")
        opt = torch.optim.AdamW(trainable_parameters(model), lr=r.lr, weight_decay=r.weight_decay)
        self.model, self.optimizer = (model, opt) if self.fsdp else self.acc.prepare(model, opt)
        if path is not None:
            osd = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=False)
            by_name = state.get("optimizer_format") == "names"
            if self.fsdp or by_name:
                inner = getattr(self.optimizer, "optimizer", self.optimizer)  # under accelerate's wrapper
                load_optimizer(self._bare(), inner, osd if by_name else names_keyed(osd, names))
            else:
                self.optimizer.load_state_dict(osd)
            rng_file = path / f"rng-rank{self.rank}.pt"
            if rng_file.is_file():
                ckpt.set_rng_state(torch.load(rng_file, weights_only=False))
            else:
                log.warning("%s missing (different process count?); seeding from the step", rng_file)
                _seed_all(self.cfg.rl.seed * 1000 + self.rank + 7919 * int(state["step"]))
        return state

    # ------------------------------------------------------------------ saving
    def save(self, step: int) -> Path:
        tmp, final = ckpt.tmp_dir(self.ck_root, step), ckpt.step_dir(self.ck_root, step)
        if self.main:
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir(parents=True)
        self.acc.wait_for_everyone()
        torch.save(ckpt.rng_state(), tmp / f"rng-rank{self.rank}.pt")
        unwrapped = self._bare()
        is_peft = hasattr(unwrapped, "peft_config")
        if self.fsdp:  # every rank sends its shards; the main process gets them whole
            state_dict, opt_state = full_state(self.model, self.optimizer)
        else:
            state_dict = None if is_peft else self.acc.get_state_dict(self.model)
            opt_state = self.optimizer.state_dict() if self.main else None
        if self.main:
            save_model(unwrapped, self.tokenizer, tmp / "model", state_dict=state_dict)
            torch.save(opt_state, tmp / "optimizer.pt")
            state = {"step": step, "cursor": self.sampler.cursor(step), "seed": self.cfg.rl.seed,
                     "base_model": str(self.base), "world_size": self.world,
                     "model": "adapter" if is_peft else "full", "skills": self.env.snapshot(step),
                     "optimizer_format": "names" if self.fsdp else "indices", "fsdp": self.fsdp,
                     "saved_at": time.time()}
            (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1))
        self.acc.wait_for_everyone()
        if self.main:
            ckpt.seal(tmp, final)
            ckpt.prune(self.ck_root, self.cfg.rl.keep_checkpoints)
        self.acc.wait_for_everyone()
        return final

    # ------------------------------------------------------------------ one step
    def _collect(self, tasks: list, gen, step: int) -> Collected:
        """This process's prepared groups for the step; with ``rl.dynamic_sampling`` from tasks
        oversampled up front, those without reward variance rejected (``dynamic.collect_step``)."""
        r = self.cfg.rl
        prs_rng = random.Random(r.seed * 1_000_003 + step * 1009 + self.rank)
        with self._whole():  # every round inside one gathering: ranks may collect a different number of times
            return collect_step(tasks, lambda ts: self.env.collect(ts, gen, step),
                                lambda g: prepare_group(g, self.cfg, prs_rng), self.env.staged,
                                lambda rnd, n, seen: self.sampler.extra_for(step, self.rank, rnd, n, seen),
                                dynamic=r.dynamic_sampling, oversample=r.dynamic_oversample,
                                max_factor=r.dynamic_max_factor)

    def _group_sums(self, groups: list[TaskGroup]) -> dict[str, tuple[float, float]]:
        s: dict[str, list[float]] = {k: [0.0, 0.0] for k in (
            "reward/policy", "reward/select", "reward/summary", "reward/best_turn", "correct/policy",
            "speedup/correct", "fast_1/policy", "fast_1.5/policy", "turns/episode", "gen_tokens", "gen_errors")}

        def add(key, value, n=1.0):
            s[key][0] += value
            s[key][1] += n

        for g in groups:
            for t in g.selections:
                add("reward/select", t.reward or 0.0)
            for t in g.summaries:
                add("reward/summary", t.reward or 0.0)
            for e in g.episodes:
                add("reward/best_turn", max(e.rewards) if e.rewards else 0.0)
                add("turns/episode", len(e.turns))
                for t in e.turns:
                    add("reward/policy", t.reward or 0.0)
                    ok = bool(t.result is not None and t.result.correct)
                    add("correct/policy", float(ok))
                    if ok and t.result.speedup is not None:
                        add("speedup/correct", t.result.speedup)
                    fast = t.result.speedup if ok and t.result.speedup is not None else 0.0
                    add("fast_1/policy", float(fast > 1.0))  # Fast_p of the sampled kernels
                    add("fast_1.5/policy", float(fast > 1.5))
            for t in group_turns(g):
                if t.completion is not None and t.completion.token_ids:
                    add("gen_tokens", len(t.completion.token_ids), 0.0)
                if t.completion is not None and t.completion.error:
                    add("gen_errors", 1.0, 0.0)
        return {k: (v[0], v[1]) for k, v in s.items()}

    def _reduce(self, sums: dict[str, tuple[float, float]]) -> dict[str, float]:
        keys = sorted(sums)
        t = torch.tensor([[sums[k][0], sums[k][1]] for k in keys], dtype=torch.float64)
        if self.world > 1:
            t = self.acc.reduce(t.to(self.acc.device), reduction="sum").cpu()
        out = {}
        for k, (total, n) in zip(keys, t.tolist()):
            out[k] = total / n if n > 0 else total
        return out

    def step(self, step: int) -> dict:
        t0 = time.perf_counter()
        tasks = self.sampler.batch_for(step)
        mine = tasks[self.rank::self.world]
        gen = (self.server.generator if self.server is not None
               else LocalGenerator(self._bare(), self.tokenizer, device=self.acc.device))
        got = self._collect(mine, gen, step)
        t_gen = time.perf_counter() - t0
        _warn_gen_errors(got.sampled, step)
        samples = build_samples(got.groups, self.tokenizer)
        upd = update(self.model, self.optimizer, samples, self.settings, self.acc)
        if self.server is not None:  # the server samples the next step with these weights
            upd.update(self.server.sync(self._bare(), step))
        staged = got.staged
        if self.world > 1:
            from accelerate.utils import gather_object

            staged = gather_object([staged])
            staged = [s for part in staged for s in part]
        admitted = self.env.commit(staged, step, write=self.main)
        sums = self._group_sums(got.sampled)
        sums.update(self.env.metrics(got.sampled))
        sums["prs_dropped"] = (float(got.prs_dropped), 0.0)
        sums.update({k: (v, 0.0) for k, v in got.counts.items()})  # totals over the processes
        sums["samples"] = (float(len(samples)), 0.0)
        m = self._reduce(sums)
        m.update(upd)
        m.update({"tasks": [t.name for t in tasks], "skills_admitted": admitted, "lr": self.cfg.rl.lr,
                  "gen_s": t_gen, "step_s": time.perf_counter() - t0,
                  "update_tokens_per_s": upd["update_tokens"] / max(upd["update_s"], 1e-9)})
        if self.world > 1 and not self.fsdp:
            m["param_sync_spread"] = self._param_spread()
        if self.cfg.rl.eval_every and step % self.cfg.rl.eval_every == 0 and self.env.val_tasks():
            with self._whole():  # every rank takes part in gathering the shards, the main one validates
                m.update(self.validate(gen, step))
        return m

    def _bare(self):
        """The model without accelerate's wrappers (a sharded model is used as it is)."""
        return self.model if self.fsdp else self.acc.unwrap_model(self.model)

    def _whole(self):
        """Keeps a sharded model gathered while it generates (ranks generate different amounts)."""
        return gathered(self.model) if self.fsdp else contextlib.nullcontext()

    def _param_spread(self) -> float:
        """Max − min over ranks of a weight checksum: 0 when the replicas stay in sync."""
        with torch.no_grad():
            total = sum(float(p.double().sum()) for p in self.acc.unwrap_model(self.model).parameters())
        sums = self.acc.gather(torch.tensor([total], dtype=torch.float64, device=self.acc.device)).cpu()
        return float(sums.max() - sums.min())

    def validate(self, gen, step: int) -> dict:
        from ..report.fastp import fast_p, level_of

        results = self.env.validate(gen, step) if self.main else []
        out = {}
        for lvl in sorted({level_of(r) for r in results}):
            rs = [r for r in results if level_of(r) == lvl]
            for p in (0.0, 1.0, 1.2, 1.5, 2.0):
                out[f"val/L{lvl}/fast_{p:g}"] = fast_p(rs, p)
        return out

    def run(self) -> dict:
        try:
            return self._run()
        finally:
            if self.server is not None:
                self.server.close()

    def _run(self) -> dict:
        last: dict = {}
        r = self.cfg.rl
        with progress_bar(r.steps, self.start_step, "rl", enabled=self.main) as shown:
            for step in range(self.start_step + 1, r.steps + 1):
                last = self.step(step)
                if self.main:
                    self.log.write(step, last)
                    self.echo(f"step {step}/{r.steps}  reward/policy {last.get('reward/policy', 0):.3f}  "
                              f"reward/select {last.get('reward/select', 0):.3f}  {last['step_s']:.1f}s")
                if step % r.save_every == 0 or step == r.steps:
                    self.save(step)
                shown(step, f"reward/policy {last.get('reward/policy', 0):.3f}")
        if self.main and self.log is not None:
            self.log.close()
        self.acc.wait_for_everyone()
        return last


def _warn_gen_errors(groups: list[TaskGroup], step: int) -> None:
    """One warning per step naming how many model calls failed and the first reason (an
    out-of-memory sampler otherwise shows only as zero rewards)."""
    errs = [t.completion.error for g in groups for t in group_turns(g)
            if t.completion is not None and t.completion.error]
    if errs:
        log.warning("step %d: %d model call(s) failed; first: %s", step, len(errs), errs[0])


def train_rl(cfg: Config, out: Optional[str] = None, resume: bool = False, echo=None) -> dict:
    return RLTrainer(cfg, out=out, resume=resume, echo=echo).run()
