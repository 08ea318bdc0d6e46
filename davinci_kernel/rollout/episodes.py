"""Policy rollouts of one task: every scheme's n rollouts, turn by turn.

Covers: building each rollout's conversation (system prompt with its scheme's skills,
the task), then for each of up to T turns: one batched generation for all rollouts,
code extraction, one concurrent evaluation of every extracted candidate, rewards, and
the feedback message that opens the next turn. A reply without code becomes a turn with
a ``parse_error`` and that error as the next feedback; a failed generation (server down
after retries) becomes a turn with ``kept=False`` and the same prompt is sent again next
turn. Does not cover: choosing the schemes (``selection``) or summaries (``summary``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from ..agents.policy import extract_code, feedback_message, first_messages
from ..records import Episode, ErrorKind, EvalResult, Skill, Stage, Task, Turn
from .context import Context
from .rewards import policy_reward


def no_code_result(task: Task, error: Optional[str]) -> EvalResult:
    """The result a turn without a candidate counts as (the rewards' convention)."""
    return EvalResult(task=task.name, level=task.level, compiled=False, correct=False, stage=Stage.STATIC,
                      error_kind=ErrorKind.NO_CODE, error_msg=error or "no code", feedback=f"Format error: {error}")


async def run_episodes(ctx: Context, task: Task, schemes: Sequence[Sequence[Skill]], n: int,
                       greedy: bool = False, turns: Optional[int] = None) -> list[Episode]:
    T = turns or ctx.rollout.turns
    language = ctx.rollout.language
    episodes: list[Episode] = []
    convs: list[list[dict]] = []
    for si, skills in enumerate(schemes):
        for r in range(n):
            episodes.append(Episode(task=task.name, scheme=si, rollout=r, skills=[s.name for s in skills]))
            convs.append(first_messages(task, skills, language))
    for t in range(T):
        comps = await ctx.generate([ctx.request(list(c), "policy", greedy=greedy) for c in convs])
        pending: list[tuple[int, str]] = []
        for i, (ep, conv, comp) in enumerate(zip(episodes, convs, comps)):
            turn = Turn(role="policy", task=task.name, messages=list(conv), completion=comp,
                        scheme=ep.scheme, rollout=ep.rollout, turn=t)
            if comp.error:
                turn.kept = False
                turn.parse_error = f"generation failed: {comp.error}"
            else:
                parsed = extract_code(comp.text)
                turn.parsed = parsed.code
                turn.parse_error = parsed.error
                if parsed.code:
                    pending.append((i, parsed.code))
            ep.turns.append(turn)
        results = await ctx.evaluate([(task, code) for _, code in pending])
        for (i, _), res in zip(pending, results):
            episodes[i].turns[-1].result = res
        for ep, conv in zip(episodes, convs):
            turn = ep.turns[-1]
            if turn.completion is not None and turn.completion.error:
                continue  # nothing to learn from or answer to; the prompt is sent again
            turn.reward = policy_reward(turn.result, ctx.rewards)
            if t + 1 < T:
                conv.append({"role": "assistant", "content": turn.completion.text})
                conv.append(feedback_message(t + 1, T, result=turn.result, parse_error=turn.parse_error,
                                             truncated=turn.completion.finish_reason == "length"))
        ctx.tick("turn")
    return episodes


def last_result(task: Task, ep: Episode) -> EvalResult:
    """The last turn's result (a no-code result when it had no candidate)."""
    for turn in reversed(ep.turns):
        if turn.completion is not None and turn.completion.error:
            continue
        return turn.result or no_code_result(task, turn.parse_error)
    return no_code_result(task, "every generation failed")


def best_result(task: Task, ep: Episode) -> EvalResult:
    """The best turn's result: correct and fastest; the last turn's when none is correct."""
    i = ep.best_turn
    return ep.turns[i].result if i is not None else last_result(task, ep)
