"""The probe: after SFT and before any arm, can a skill be admitted at all, and would it
transfer? Its go/no-go thresholds are the protocol's (``probe.go``), fixed beforehand.

For each RL task, with the SFT model (``measure``):

1. ``summary_share``: of ``probe.summaries`` summaries sampled for a slow -> fast episode of
   the task (its slow variant at turn 1, its fast one at turn 2), the share that parse, pass
   the admission filter's static checks (``content_filter``, against the fast kernel) and
   carry the task's technique (``technique_present`` on the skill's Example); the filter's
   execution check (the Example pasted alone must not solve the task) runs in the arms;
2. ``greedy_with_skill_fast``: a greedy turn 1 on the held-out sibling with the first such
   skill in the system prompt is correct and faster than p (Fast_1.2) in a fresh evaluation;
3. ``noskill_fast_share``: of ``probe.noskill_samples`` no-skill turn-1 samples on the
   sibling, the share that are Fast_1.2 anyway.

Each task's record keeps the first two summaries and the greedy turn's text with its
verdict (``texts``), so that a no-go can be read without another device call.
``decide`` (pure) applies the thresholds: per RL task and overall, with the reasons of a
no-go, which point at the SFT data (``sftdata.py``) to change before any arm time is
spent. ``entry`` is what the results record per probe: {date, card, the three shares, go}.
Does not cover: the role checks that must pass first (``roles.py``).
"""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

TEXT_CHARS = 6000  # of each reply kept in the record (two summaries and the greedy turn), to read a no-go

SFT_HINT = {
    "summary_share": "teach the summary to write the technique skill: more practice_summary rows "
                     "(sft.summary_copies), the Example the technique snippet",
    "greedy_with_skill_fast": "teach applying a skill at turn 1: more practice_apply rows (sft.apply_copies) across "
                              "the techniques",
    "noskill_fast_share": "the held-out sibling is fast without a skill: the practice data teach the technique "
                          "without one (check practice_no_skill rows answer the lacking kernel)",
}


def decide(p: dict, tasks: dict[str, dict]) -> dict:
    """{go, tasks_go, why}: per RL task the three numbers against ``probe.go``; the probe
    goes when at least ``rl_tasks_go_min`` RL tasks go. ``tasks``: RL task -> {summary_share,
    greedy_with_skill_fast, noskill_fast_share}."""
    g = p["probe"]["go"]
    why, ok = [], {}
    for task, m in tasks.items():
        problems = []
        if m["summary_share"] < g["summary_share_min"]:
            problems.append(("summary_share", f"summary_share {m['summary_share']:.2f} < {g['summary_share_min']}"))
        if g["greedy_with_skill_fast"] and not m["greedy_with_skill_fast"]:
            problems.append(("greedy_with_skill_fast", "a greedy turn 1 with the skill on the sibling is not Fast_1.2"))
        if m["noskill_fast_share"] > g["noskill_fast_share_max"]:
            problems.append(("noskill_fast_share",
                             f"noskill_fast_share {m['noskill_fast_share']:.2f} > {g['noskill_fast_share_max']}"))
        ok[task] = not problems
        why += [(key, f"{task}: {text}") for key, text in problems]
    go = sum(ok.values()) >= min(g["rl_tasks_go_min"], len(tasks))
    return {"go": go, "tasks_go": ok, "why": [text for _, text in why],
            "change": [] if go else [SFT_HINT[k] for k in dict.fromkeys(key for key, _ in why)]}


def entry(p: dict, tasks: dict[str, dict], card: str, gpu: str, date: str | None = None) -> dict:
    """One probe's record: the date, the card, the three shares (means over RL tasks), go."""
    import torch

    n = max(len(tasks), 1)
    d = decide(p, tasks)
    out = {"date": date or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "card": card, "gpu": gpu, "torch": torch.__version__, "protocol_version": p["version"],
           "summary_share": sum(m["summary_share"] for m in tasks.values()) / n,
           "greedy_with_skill_fast_share": sum(bool(m["greedy_with_skill_fast"]) for m in tasks.values()) / n,
           "noskill_fast_share": sum(m["noskill_fast_share"] for m in tasks.values()) / n,
           "go": d["go"], "tasks": tasks, "tasks_go": d["tasks_go"], "thresholds": p["probe"]["go"], "why": d["why"]}
    if not d["go"]:
        out["change"] = d["change"] + ["then rerun prepare in a new run folder and probe again (sftdata.py)"]
    return out


def skill_passes(tech: str, skill, best_code: str) -> bool:
    """The skill passes the admission filter's static checks (against the episode's best
    kernel) and its Example carries the technique."""
    from .catalog import admission_refusal, skill_example
    from .techniques import technique_present

    return admission_refusal(skill, best_code) is None and technique_present(tech, skill_example(skill))


def backend_of(model_dir: Path, p: dict):
    """The SFT model as a generation backend (bf16 autocast on a GPU that has it)."""
    import torch

    from davinci_kernel.rl.local_gen import LocalBackend
    from davinci_kernel.rl.modeling import bf16_supported, load_model, load_tokenizer

    model = load_model(model_dir, bf16=True, grad_checkpointing=False)
    model.config.use_cache = True
    if torch.cuda.is_available():
        model = model.to("cuda")
    model.eval()
    cast = torch.bfloat16 if torch.cuda.is_available() and bf16_supported() else None
    return LocalBackend(model, load_tokenizer(model_dir), max_batch=p["rl"]["gen_batch"], autocast=cast)


def measure(p: dict, backend, book, tasks: dict, cat: dict, noise_names: list[str], speeds: dict,
            echo=print) -> dict:
    """RL task -> {sibling, technique, summary_share, summaries, passing, greedy_with_skill_fast,
    greedy_speedup, noskill_fast_share, noskill_samples}. ``tasks``: name -> Task (RL and
    held-out); ``book``: the run's verdict book (the greedy turn judged fresh); ``speeds``:
    (task, variant) -> the speedup its summary prompt states."""
    from davinci_kernel.agents.policy import extract_code, first_messages
    from davinci_kernel.agents.summary import parse_summary, summary_messages
    from davinci_kernel.llm.base import GenRequest

    from .catalog import by_role
    from .techniques import technique_present

    r, pr, thr = p["rl"], p["probe"], p["margin_rule"]["p"]
    lim = r["max_new_tokens"]
    out = {}

    def gen(reqs):
        return asyncio.run(backend.generate(reqs))

    def judged(task, texts: list[str], fresh: bool):
        codes = [extract_code(t).code for t in texts]
        items = [(task, c) for c in codes if c]
        got = iter((book.evaluate_fresh if fresh else book.evaluate_many)(items) if items else [])
        return [next(got) if c else None for c in codes]

    def fast(res) -> bool:
        return bool(res is not None and res.correct and (res.speedup or 0.0) > thr)

    for name, spec in p["rl_tasks"].items():
        sib = next(h for h, s in p["heldout_tasks"].items() if s["sibling"] == name)
        tech, k = spec["technique"], by_role(cat[name])
        sp = {role: speeds.get((name, k[role]["name"])) for role in ("slow", "fast")}
        msgs = summary_messages(tasks[name], k["slow"]["source"], sp["slow"], k["fast"]["source"], sp["fast"], 2, (),
                                noise_names, r["max_new_skills"])
        replies = gen([GenRequest(msgs, temperature=r["temperature"], max_new_tokens=lim["summary"], seed=i)
                       for i in range(pr["summaries"])])
        passing = []
        for c in replies:
            good = [s for s in parse_summary(c.text, r["max_new_skills"]).skills if skill_passes(tech, s, k["fast"]["source"])]
            passing.append(good[0] if good else None)
        share = sum(x is not None for x in passing) / max(len(passing), 1)
        skill = next((x for x in passing if x is not None), None)
        greedy, greedy_sp = False, None
        texts = {"summaries": [c.text[:TEXT_CHARS] for c in replies[:2]], "greedy": None, "greedy_verdict": None}
        if skill is not None:
            (c,) = gen([GenRequest(first_messages(tasks[sib], [skill]), temperature=0.0,
                                   max_new_tokens=lim["policy"])])
            (res,) = judged(tasks[sib], [c.text], fresh=True)
            greedy, greedy_sp = fast(res), (res.speedup if res is not None and res.correct else None)
            texts["greedy"] = c.text[:TEXT_CHARS]
            texts["greedy_verdict"] = None if res is None else {
                "correct": res.correct, "speedup": res.speedup, "error_kind": res.error_kind,
                "technique": technique_present(tech, extract_code(c.text).code or "")}
        noskill = gen([GenRequest(first_messages(tasks[sib]), temperature=r["temperature"],
                                  max_new_tokens=lim["policy"], seed=1000 + i) for i in range(pr["noskill_samples"])])
        res = judged(tasks[sib], [c.text for c in noskill], fresh=False)
        out[name] = {"sibling": sib, "technique": tech, "summary_share": share, "summaries": len(passing),
                     "skill": skill.name if skill is not None else None, "greedy_with_skill_fast": greedy,
                     "greedy_speedup": greedy_sp, "noskill_fast_share": sum(map(fast, res)) / max(len(res), 1),
                     "noskill_samples": len(res), "texts": texts}
        echo(f"probe {name}: summaries passing {share:.2f}, greedy with skill on {sib} "
             f"{'fast' if greedy else 'not fast'}, no-skill fast {out[name]['noskill_fast_share']:.2f}")
    return out
