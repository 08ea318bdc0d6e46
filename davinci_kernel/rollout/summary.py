"""Skill summaries after a strong episode, and their verification by execution.

Covers: the trigger (turn 1 correct; best turn ≥ ``summary_min_speedup`` and
≥ ``summary_min_gain`` × the turn-1 speedup), choosing the group's episode to summarize
(the triggered one with the fastest best turn), s summary samples in one batch, and for
every proposed skill that passes ``skills.admit.content_filter``: one greedy turn-1
generation with the scheme's skills plus the new one, evaluated concurrently in a fresh
evaluation (no verdict reused from the rollouts), judged by
``skills.admit.verify`` and staged through ``Admission``. A proposal is filtered against
the episode's best kernel too (an Example that copies it is refused), and, with
``skills.example_solve_check``, its Example pasted alone as the candidate
(``skills.admit.example_candidate``) is judged in the same fresh batch: correct there, the
skill is refused (``example_solves_task``). Summary turns get the
summarizer's reward (``rewards.summary_reward``: best verified speedup among its skills, else 0).
Does not cover: committing staged skills (the caller does, after its update succeeds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from ..agents.policy import extract_code, first_messages
from ..agents.summary import parse_summary, summary_messages
from ..records import Episode, EvalResult, Skill, Task, Turn
from ..skills.admit import Admission, content_filter, example_candidate, verify
from .context import Context
from .episodes import no_code_result
from .rewards import summary_reward


@dataclass
class Trigger:
    episode: Episode
    best_turn: int
    first_speedup: float
    best_speedup: float


def trigger(ep: Episode, min_speedup: float, min_gain: float) -> Optional[Trigger]:
    if not ep.turns:
        return None
    first = ep.turns[0].result
    if first is None or not first.correct or first.speedup is None:
        return None
    b = ep.best_turn
    best = ep.turns[b].result.speedup if b is not None else None
    if best is None or best < min_speedup or best < min_gain * first.speedup:
        return None
    return Trigger(ep, b, first.speedup, best)


def pick_trigger(episodes: Sequence[Episode], ctx: Context) -> Optional[Trigger]:
    fired = [t for t in (trigger(e, ctx.rollout.summary_min_speedup, ctx.rollout.summary_min_gain)
                         for e in episodes) if t is not None]
    return max(fired, key=lambda t: (t.best_speedup, t.best_speedup / t.first_speedup), default=None)


async def summarize(ctx: Context, task: Task, trig: Trigger, used: Sequence[Skill],
                    existing: Sequence[str]) -> list[Turn]:
    ep = trig.episode
    msgs = summary_messages(task, ep.turns[0].parsed or "", trig.first_speedup, ep.turns[trig.best_turn].parsed or "",
                            trig.best_speedup, trig.best_turn + 1, used, existing, ctx.skills.max_new_skills)
    comps = await ctx.generate([ctx.request(msgs, "summary") for _ in range(ctx.rollout.s_summaries)])
    turns = []
    for i, comp in enumerate(comps):
        turn = Turn(role="summary", task=task.name, messages=msgs, completion=comp, scheme=ep.scheme,
                    rollout=ep.rollout, turn=i)
        if comp.error:
            turn.kept = False
            turn.parse_error = f"generation failed: {comp.error}"
        else:
            p = parse_summary(comp.text, ctx.skills.max_new_skills)
            turn.parse_error = p.error
            turn.parsed = {"think": p.think, "skills": [s.to_dict() for s in p.skills], "problems": p.problems}
        turns.append(turn)
    return turns


async def verify_and_stage(ctx: Context, task: Task, trig: Trigger, scheme: Sequence[Skill],
                           summaries: list[Turn], admission: Admission) -> list[Turn]:
    """Greedy re-generation with each filtered proposal; stage the verified ones; set
    every summary turn's reward from the speedups of its verified skills."""
    proposals: list[tuple[int, Skill]] = []
    verified: dict[int, list[float]] = {}
    verifications: list[Turn] = []
    best_code = trig.episode.turns[trig.best_turn].parsed or None
    for si, turn in enumerate(summaries):
        for d in (turn.parsed or {}).get("skills", []):
            skill = Skill.from_dict(d)
            reason = content_filter(skill, best_code)
            if reason is None:
                proposals.append((si, skill))
            else:
                dec = admission.consider(task.name, skill, _never, trig.first_speedup, ctx.skills, best_code)
                verifications.append(Turn(role="verify", task=task.name, turn=si, kept=False,
                                          parsed={"skill": skill.name, "staged": False, "reason": reason,
                                                  "rule": dec.rule}))
    convs = [first_messages(task, list(scheme) + [skill], ctx.rollout.language) for _, skill in proposals]
    comps = await ctx.generate([ctx.request(c, "policy", greedy=True) for c in convs])
    codes = [extract_code(c.text) if not c.error else None for c in comps]
    pending = [(i, p.code) for i, p in enumerate(codes) if p is not None and p.code]
    examples = ([(i, example_candidate(skill)) for i, (_, skill) in enumerate(proposals)]
                if ctx.skills.example_solve_check else [])
    examples = [(i, code) for i, code in examples if code is not None]
    results: list[Optional[EvalResult]] = [None] * len(proposals)
    example_results: list[Optional[EvalResult]] = [None] * len(proposals)
    # never a reused verdict; the re-generations and the pasted Examples in one batch
    judged = await ctx.evaluate([(task, code) for _, code in pending + examples], fresh=True)
    for (i, _), res in zip(pending, judged):
        results[i] = res
    for (i, _), res in zip(examples, judged[len(pending):]):
        example_results[i] = res
    for i, ((si, skill), conv, comp) in enumerate(zip(proposals, convs, comps)):
        parsed = codes[i]
        res = results[i] or no_code_result(task, comp.error or (parsed.error if parsed else None))
        v = verify(skill, lambda _s, r=res: r, trig.first_speedup, ctx.skills, example_result=example_results[i])
        d = admission.stage(task.name, skill, v, best_code)
        if v.ok:
            verified.setdefault(si, []).append(v.speedup or 0.0)
        ex = example_results[i]
        verifications.append(Turn(role="verify", task=task.name, messages=conv, completion=comp, turn=si,
                                  parsed={"skill": skill.name, "code": parsed.code if parsed else None,
                                          "staged": d.staged, "reason": d.reason, "rule": d.rule,
                                          "example_judged": None if ex is None else {
                                              "correct": bool(ex.correct), "speedup": ex.speedup}},
                                  parse_error=parsed.error if parsed else comp.error, result=results[i]))
    for si, turn in enumerate(summaries):
        turn.reward = summary_reward(verified.get(si, []))
    return verifications


def _never(skill: Skill):  # consider() only calls the verifier for skills that pass the filter
    raise AssertionError(f"skill {skill.name} was rejected by the filter and must not be verified")
