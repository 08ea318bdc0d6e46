"""One row per RL step of one arm and seed, from the step's task groups.

Covers: performance (turn-1 and best-turn Fast_1 / Fast_1.2, the turn-1 correct share and
mean speedup, also split by whether the scheme held an admitted skill), the summary
funnel (triggered, sampled, parsed, proposed, filtered, regenerated, verified, staged,
committed), the library (its size, each admission with its turn-1 baseline and
verification speedup), use of admitted skills (their share of the selected schemes, the
selection reward and advantage of schemes with one against those without), and per task
the step of its first admission beside its turn-1 fast-variant share. The library starts
from the distractor skills (no source task); every skill with a source task was admitted
during the run, and only those count as admitted (``library_size`` counts them,
``distractor_share_of_schemes`` the schemes that hold a distractor). Does not cover: running the step
(``runner.py``) or comparing arms (``report.py``).
"""

from __future__ import annotations

from types import SimpleNamespace

from kernel_variants import classify

FUNNEL = ("triggered", "sampled", "parsed", "proposed", "filtered", "regenerated", "verified", "staged",
          "committed")
STEP_KEYS = ("reward/policy", "reward/select", "reward/summary", "samples", "dynamic/zero_variance", "gen_s",
             "sample_s", "update_s", "step_s")


def _fast(results: list, p: float) -> float:
    """Share of ``results`` (EvalResult or None) correct with speedup > p (Fast_p)."""
    if not results:
        return 0.0
    return sum(1 for r in results if r is not None and r.correct and (r.speedup or 0.0) > p) / len(results)


def share(samples: list[dict], key: str) -> float:
    """Share of ``samples`` whose ``key`` is true (0.0 for none)."""
    return sum(1 for x in samples if x[key]) / len(samples) if samples else 0.0


def _mean(xs: list) -> float | None:
    return sum(xs) / len(xs) if xs else None


def performance(groups, library: set[str]) -> dict:
    turn1, best, with_skill, without = [], [], [], []
    for g in groups:
        for ep in g.episodes:
            if not ep.turns:
                continue
            r1 = ep.turns[0].result
            turn1.append(r1)
            (with_skill if library & set(ep.skills) else without).append(r1)
            b = ep.best_turn
            best.append(ep.turns[b].result if b is not None else None)
    sp = [r.speedup for r in turn1 if r is not None and r.correct and r.speedup is not None]
    correct = sum(1 for r in turn1 if r is not None and r.correct)
    return {"turn1_fast_1.2": _fast(turn1, 1.2), "best_fast_1.2": _fast(best, 1.2), "turn1_fast_1": _fast(turn1, 1.0),
            "best_fast_1": _fast(best, 1.0), "turn1_correct": correct / len(turn1) if turn1 else 0.0,
            "turn1_speedup": _mean(sp), "turn1_samples": len(turn1),
            "turn1_fast_1.2_with_admitted": _fast(with_skill, 1.2) if with_skill else None,
            "turn1_fast_1.2_without_admitted": _fast(without, 1.2) if without else None,
            "turn1_samples_with_admitted": len(with_skill)}


def funnel(groups, cfg, staged: int, committed: int) -> dict[str, int]:
    """The summary funnel of one step; ``verified``: re-generations correct and at least
    max(verify_min_speedup, verify_min_gain x the summarized episode's turn-1 speedup)."""
    from davinci_kernel.rollout.summary import pick_trigger

    out = dict.fromkeys(FUNNEL, 0)
    ctx = SimpleNamespace(rollout=cfg.rollout)
    for g in groups:
        out["triggered"] += bool(g.summaries)
        out["sampled"] += len(g.summaries)
        for t in g.summaries:
            if not t.parse_error:
                out["parsed"] += 1
                out["proposed"] += len((t.parsed or {}).get("skills", []))
        trig = pick_trigger(g.episodes, ctx) if g.verifications else None
        need = max(cfg.skills.verify_min_speedup, cfg.skills.verify_min_gain * trig.first_speedup) if trig else None
        for v in g.verifications:
            out["filtered"] += bool(v.kept)
            out["regenerated"] += v.completion is not None and not v.completion.error
            r = v.result
            out["verified"] += bool(need is not None and r is not None and r.correct and (r.speedup or 0.0) >= need)
    out["staged"], out["committed"] = staged, committed
    return out


def selection_use(groups, library: dict) -> dict:
    """The selected schemes (the k selection samples; the null scheme is not one) that hold
    an admitted skill, that hold one admitted on the same task, and the selection reward and
    advantage with and without one. ``library``: name -> source task."""
    n = with_any = own = 0
    split: dict[str, list] = {"with_admitted": [], "without_admitted": []}
    for g in groups:
        for t in g.selections:
            names = set((t.parsed or {}).get("selected") or [])
            n += 1
            hit = bool(names & set(library))
            with_any += hit
            own += any(library.get(s) == g.task for s in names)
            split["with_admitted" if hit else "without_admitted"].append(t)
    return {"admitted_share_of_schemes": with_any / n if n else 0.0,
            "own_task_skill_share_of_schemes": own / n if n else 0.0, "selected_schemes": n,
            "selection": {k: {"schemes": len(ts), "reward": _mean([t.reward for t in ts if t.reward is not None]),
                              "advantage": _mean([t.advantage for t in ts if t.advantage is not None])}
                          for k, ts in split.items()}}


def admissions(before: list, after: list, staged: dict, step: int) -> list[dict]:
    """Skills committed this step (in the library after, not before) with what admitted
    them: the task, the summarized episode's turn-1 speedup (the baseline) and the fresh
    verification's speedup. ``staged``: task -> (Skill, Verification) before the commit."""
    old = {(s.name, s.step) for s in before}
    out = []
    for s in after:
        if (s.name, s.step) in old:
            continue
        v = staged.get(s.source_task, (None, None))[1]
        out.append({"task": s.source_task, "step": step, "skill": s.name,
                    "turn1_baseline": getattr(v, "original_speedup", None),
                    "verify_speedup": s.verify_speedup, "verify_gpu": s.gpu})
    return out


def per_task(groups, sources: dict[str, dict[str, str]], fast: dict[str, str], first_admission: dict) -> dict:
    """task -> its first admission step (None: none yet), turn-1 variant counts and the
    share of turn-1 samples that are its fast variant."""
    out = {}
    for g in groups:
        counts: dict[str, int] = {}
        for ep in g.episodes:
            if ep.turns:
                code = ep.turns[0].parsed if isinstance(ep.turns[0].parsed, str) else None
                kind = classify(code, sources[g.task])
                counts[kind] = counts.get(kind, 0) + 1
        total = sum(counts.values())
        out[g.task] = {"first_admission_step": first_admission.get(g.task), "turn1_variants": counts,
                       "turn1_fast_variant_share": counts.get(fast[g.task], 0) / total if total else 0.0}
    return out


def step_row(arm: str, seed: int, step: int, groups, m: dict, cfg, before: list, after: list, staged: dict,
             sources: dict, fast: dict, first_admission: dict, fresh: int) -> dict:
    """The row of one step (``first_admission`` is updated in place)."""
    adm = admissions(before, after, staged, step)
    for a in adm:
        first_admission.setdefault(a["task"], step)
    library = {s.name: s.source_task for s in before if s.source_task}  # admitted skills selection saw this step
    noise = {s.name for s in before if not s.source_task}
    row = {"arm": arm, "seed": seed, "step": step, "library_size": sum(1 for s in after if s.source_task),
           "distractors": sum(1 for s in after if not s.source_task), "admitted": int(m.get("skills_admitted") or 0)}
    row.update(performance(groups, set(library)))
    use = selection_use(groups, library)
    row["admitted_share_of_schemes"] = use.pop("admitted_share_of_schemes")
    row["distractor_share_of_schemes"] = selection_use(groups, dict.fromkeys(noise, ""))["admitted_share_of_schemes"]
    row.update(use)
    row["funnel"] = funnel(groups, cfg, len(staged), row["admitted"])
    row["admissions"] = adm
    row["per_task"] = per_task(groups, sources, fast, first_admission)
    row["fresh_verifications"] = fresh
    row.update({k: m.get(k) for k in STEP_KEYS})
    return row
