"""A small synthetic environment whose reward depends on what the model writes.

Covers: ``SyntheticEnv``, which plays the whole daVinci-kernel step with the trainer's
model — selection (k sampled schemes + a null scheme), multi-turn policy episodes with
feedback in the prompt, summaries with verification and staged skills — and scores the
generated tokens instead of running kernels. Each role has its own target token class
(token id mod 4 = 0 for the policy, 1 for the selector, 2 for the summarizer); the
share of target tokens is the "quality" of an answer, so chance level is about 0.25.
A policy turn becomes an ``EvalResult`` (correct when it hits at least one target token,
speedup = 0.5 + a·policy share + b·share of the scheme's selection; with a = 0 the
policy's own tokens do not matter, which isolates the selector's learning signal), so rewards come
from the real reward functions, and the selector is rewarded only through the policy
rollouts of its scheme, as in the real pipeline. Used by ``configs/tiny-cpu.yaml`` and the
learning test.

Does not cover: real tasks, kernels or evaluation (``RolloutEnv`` in ``env.py``).
"""

from __future__ import annotations

from ..records import Completion, Episode, EvalResult, Skill, Stage, Task, TaskGroup, Turn
from ..rollout.rewards import summary_reward

ROLE_CLASS = {"policy": 0, "select": 1, "summary": 2}
SYSTEM = {
    "select": "You are the skill selection agent. Pick skills for the task.",
    "policy": "You are the policy agent. Write ModelNew with a fast kernel.",
    "summary": "You are the skill summary agent. Distill a reusable skill.",
}


def hit_rate(c: Completion, role: str) -> float:
    ids = c.token_ids or []
    if not ids:
        return 0.0
    return sum(1 for t in ids if t % 4 == ROLE_CLASS[role]) / len(ids)


class SyntheticEnv:
    name = "synthetic"

    def __init__(self, cfg, n_tasks: int = 16, n_val: int = 4, policy_gain: float = 2.0,
                 select_gain: float = 3.0):
        r = cfg.rollout
        self.policy_gain, self.select_gain = policy_gain, select_gain
        self.k, self.n, self.turns, self.s = r.k_schemes, r.n_rollouts, r.turns, r.s_summaries
        self.rollout, self.temperature, self.top_p = r, r.temperature, r.top_p
        self.min_speedup = cfg.skills.verify_min_speedup
        self._tasks = [self._task(i) for i in range(n_tasks)]
        self._val = [self._task(1000 + i) for i in range(n_val)]
        self.library: list[Skill] = []
        self._staged: list[Skill] = []

    @staticmethod
    def _task(i: int) -> Task:
        level = 1 + i % 2
        return Task(name=f"level{level}/{i}_synthetic", level=level, problem_id=i,
                    source=f"# synthetic problem {i}\n", suite="synthetic", op_type="synthetic")

    def train_tasks(self):
        return list(self._tasks)

    def val_tasks(self):
        return list(self._val)

    def _gen(self, generator, prompts, role: str):
        return generator.generate(prompts, max_new_tokens=self.rollout.max_new_tokens_for(role),
                                  temperature=self.temperature, top_p=self.top_p, stop_at_eos=False)

    def _msgs(self, role: str, task: Task, extra: str = "") -> list[dict]:
        return [{"role": "system", "content": SYSTEM[role]},
                {"role": "user", "content": f"Task {task.name}. {extra}".strip()}]

    # ------------------------------------------------------------------ one step
    def collect(self, tasks, generator, step):
        self._staged = []
        groups = [TaskGroup(task=t.name, step=step) for t in tasks]
        names = ", ".join(s.name for s in self.library[-5:]) or "none yet"
        sel_prompts = [self._msgs("select", t, f"Library: {names}") for t in tasks for _ in range(self.k)]
        sel = self._gen(generator, sel_prompts, "select")
        quality: list[list[float]] = []
        for gi, (g, t) in enumerate(zip(groups, tasks)):
            qs = []
            for j in range(self.k):
                c = sel[gi * self.k + j]
                q = hit_rate(c, "select")
                g.selections.append(Turn(role="select", task=t.name, messages=sel_prompts[gi * self.k + j],
                                         completion=c, scheme=j, turn=j, parsed={"quality": q}))
                g.schemes.append(["tiled_reduction"] if q >= 0.5 else ["naive_copy"])
                qs.append(q)
            g.schemes.append([])  # the null scheme
            quality.append(qs + [0.0])
        episodes = [(g, t, Episode(task=t.name, scheme=j, rollout=i, skills=g.schemes[j]), quality[gi][j])
                    for gi, (g, t) in enumerate(zip(groups, tasks)) for j in range(self.k + 1) for i in range(self.n)]
        for g, _, ep, _ in episodes:
            g.episodes.append(ep)
        self._policy_turns(episodes, generator)
        self._summaries(groups, tasks, generator, step)
        return groups

    def _policy_turns(self, episodes, generator):
        history = {id(ep): [] for _, _, ep, _ in episodes}
        active = list(episodes)
        for turn in range(self.turns):
            if not active:
                break
            prompts = [self._msgs("policy", t, f"Skills: {', '.join(ep.skills) or 'none'}") + history[id(ep)]
                       for _, t, ep, _ in active]
            comps = self._gen(generator, prompts, "policy")
            still = []
            for (g, t, ep, q), msgs, c in zip(active, prompts, comps):
                f = hit_rate(c, "policy")
                speed = 0.5 + self.policy_gain * f + self.select_gain * q
                ok = f > 0 or self.policy_gain == 0
                res = EvalResult(task=t.name, level=t.level, compiled=True, correct=ok, stage=Stage.DONE,
                                 speedup=speed, coverage=1.0, timing_available=True,
                                 feedback=f"correct={ok} speedup={speed:.2f}x")
                ep.turns.append(Turn(role="policy", task=t.name, messages=msgs, completion=c, scheme=ep.scheme,
                                     rollout=ep.rollout, turn=turn, parsed=c.text, result=res))
                history[id(ep)] = history[id(ep)] + [{"role": "assistant", "content": c.text},
                                                     {"role": "user", "content": "Feedback: " + res.feedback}]
                if speed < 4.0:  # a very fast kernel ends the episode early
                    still.append((g, t, ep, q))
            active = still

    def _summaries(self, groups, tasks, generator, step):
        jobs = []
        for g, t in zip(groups, tasks):
            best = None
            for ep in g.episodes:
                first, b = ep.turns[0].result, ep.best_turn
                if not first.correct or b is None:
                    continue
                s1, sb = first.speedup, ep.turns[b].result.speedup
                if sb >= 1.2 and sb >= 1.2 * s1 and (best is None or sb / s1 > best[0]):
                    best = (sb / s1, ep)
            if best is not None and self.s > 0:
                jobs += [(g, t, i) for i in range(self.s)]
        if not jobs:
            return
        prompts = [self._msgs("summary", t, "Improved episode; propose a skill.") for _, t, _ in jobs]
        comps = self._gen(generator, prompts, "summary")
        best_skill: dict[str, tuple[float, Skill]] = {}
        for (g, t, i), msgs, c in zip(jobs, prompts, comps):
            q = hit_rate(c, "summary")
            name = f"synthetic_s{step}_{t.problem_id}_{i}"
            speed = 1.0 + 2.0 * q
            g.summaries.append(Turn(role="summary", task=t.name, messages=msgs, completion=c, turn=i, parsed=[name],
                                    reward=summary_reward([speed] if speed >= self.min_speedup else [])))
            g.verifications.append(Turn(role="verify", task=t.name, turn=i, parsed=name, result=EvalResult(
                task=t.name, level=t.level, compiled=True, correct=True, stage=Stage.DONE, speedup=speed,
                timing_available=True)))
            if speed >= self.min_speedup and speed > best_skill.get(t.name, (0.0, None))[0]:
                best_skill[t.name] = (speed, Skill(name=name, description=f"synthetic skill for {t.name}",
                                                   verify_speedup=speed, source_task=t.name, step=step))
        self._staged = [s for _, s in best_skill.values()]

    # ------------------------------------------------------------------ skills
    def staged(self):
        return list(self._staged)

    def commit(self, staged, step, write):
        self.library += [s for s in staged]
        self._staged = []
        return len(staged)

    def discard(self):
        self._staged = []

    def snapshot(self, step):
        return {"step": step, "n_skills": len(self.library), "skills": [s.to_dict() for s in self.library]}

    def restore(self, info):
        self.library = [Skill.from_dict(d) for d in (info or {}).get("skills", [])]

    # ------------------------------------------------------------------ metrics
    def metrics(self, groups):
        out: dict[str, list[float]] = {"env/policy_hit": [0.0, 0.0], "env/select_hit": [0.0, 0.0],
                                       "env/summary_hit": [0.0, 0.0]}
        for g in groups:
            for role, turns in (("select", g.selections), ("summary", g.summaries),
                                ("policy", [t for e in g.episodes for t in e.turns])):
                for t in turns:
                    out[f"env/{role}_hit"][0] += hit_rate(t.completion, role)
                    out[f"env/{role}_hit"][1] += 1
        return {k: (v[0], v[1]) for k, v in out.items()}

    def validate(self, generator, step):
        prompts = [self._msgs("policy", t, "Skills: none") for t in self._val]
        out = []
        for t, c in zip(self._val, self._gen(generator, prompts, "policy")):
            f = hit_rate(c, "policy")
            out.append(EvalResult(task=t.name, level=t.level, compiled=True, correct=f > 0, stage=Stage.DONE,
                                  speedup=0.5 + self.policy_gain * f, timing_available=True))
        return out
