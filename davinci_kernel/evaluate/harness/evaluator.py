"""Judging candidates: the public entry of the harness process, which never runs candidate code.

Trust model (what this covers). The candidate is adversarial code, in its entirety, native
code included. It runs only in a candidate worker (``candidate/worker.py``): a fresh process
in a sandbox of its own (``sandbox.py``: user, IPC, UTS, cgroup, network, PID and mount
namespaces, a machine-unique uid, a private root, bounded output, quotas), which serves that
one candidate and is then killed with everything it started. Before anything runs, the
source is held to the code policy (``static.py``, ``policy.py``). The judged inputs are
drawn here (``draws.py``) and told to the worker only when the call that uses them starts;
reference outputs (every trial, the perturbed size, the timed checks, the float64 oracle)
and clean timings come from the reference process (``reference/process.py``), which never
imports a candidate. This process reads a candidate's outputs from files it opens itself
while the worker's processes are stopped (``intake.py``), compares them (``judge.py``,
``correctness.py``), and takes the worker's messages (``conversation.py``: capped, one
deadline) only as reports it checks or that can only hurt the candidate. Retry rules live in
``retry.py``. Skill library, baseline cache and results are written only by this process.

What it does not cover: the custom-kernel evidence (GPU activity records, torch work, host
reads) is recorded inside the candidate's process by code set up before the candidate runs;
a candidate's native code (``load_inline``, GPU only) could tamper with it, and its event
times are bounded by the wall time measured here only within ``eval.wall_slack``. No
seccomp; the GPU is shared with the worker. docs/guarantees.md has the full table.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Optional

from ...config import EvalConfig
from ...records import EvalResult, Task
from ...tasks.shapes import apply_overrides, cpu_overrides, odd_sizes, perturbations
from ..shared import kernelwork, memplan
from ..shared.protocol import CandidateJob, ProtocolError, TimingSettings, WorkerDied, WorkerTimeout
from ..shared.transfer import shm_root
from . import admission, batch, draws, judge, kernelcache, retry
from . import feedback as feedback_mod
from .baselines import BaselineCache
from .codepolicy import static
from .conversation import Conversation, worker_failure
from .draws import Draw
from .gate import Gates
from .isolation import sandbox
from .isolation.procs import CPU_THREADS, Limits, WorkerProcess
from .pool import LocalPool, default_slots, resolve_device
from .refcache import ReferenceCache
from .self_check import SELF_CHECK_WAIVED, self_candidate, waive
from .trusted import TrustedSide

_UNREADABLE = (TypeError, ValueError, KeyError, AttributeError, IndexError)  # reading a malformed report
CPU_UNTIMED = ("speedup_ci, peak_fraction: null on a CPU: the interpreter's time says nothing of a GPU kernel's "
               "speed (timing needs --device cuda)")


class Evaluator:
    """A pool of processes plus the judging logic. Use as a context manager."""

    def __init__(self, cfg: Optional[EvalConfig] = None, workers: Optional[int] = None,
                 pool: Optional[LocalPool] = None):
        self.cfg = cfg or EvalConfig()
        self.device = resolve_device(self.cfg.device)
        self.on_gpu = self.device.startswith("cuda")
        if self.on_gpu:  # comparisons are small: a thread per core only waits on busy cores
            import torch

            torch.set_num_threads(min(torch.get_num_threads(), CPU_THREADS))
        sandbox.harden_harness()
        sandboxed = self.cfg.sandbox != "off"
        if self.cfg.sandbox == "require":
            caps = sandbox.probe()
            if caps.missing:
                from ...errors import UsageError

                raise UsageError(f"eval.sandbox=require, but this machine lacks: {', '.join(caps.missing)}")
        slots = default_slots(self.device, workers, self.cfg.workers_per_gpu) if pool is None else None
        self.tmp_root = tempfile.mkdtemp(prefix="dvk-eval-", dir=shm_root())
        sandbox.mark_owner(self.tmp_root)  # a harness killed from here on leaves it to the next sweep
        self.pool = pool
        try:
            self._setup(pool, slots, sandboxed)
        except BaseException:  # nothing of a half-made evaluator stays behind
            if pool is None and self.pool is not None:
                self.pool.close()
            sandbox.remove_tree(self.tmp_root)
            raise

    def _setup(self, pool: Optional[LocalPool], slots: Optional[list[str]], sandboxed: bool) -> None:
        os.chmod(self.tmp_root, 0o711)  # workers reach their own scratch folder inside, nothing else
        self.timing_settings = TimingSettings.from_config(self.cfg)
        limits = Limits(memory_bytes=sandbox.memory_limit_bytes(self.cfg.worker_memory_gb),
                        cpu_seconds=int(4 * (self.cfg.compile_timeout_s + self.cfg.run_timeout_s)) + 60)
        # several workers per GPU: they check side by side, but time alone
        self._gates = getattr(pool, "gates", None) or Gates()
        self.pool = pool or LocalPool(slots, root=self.tmp_root, spares=self.cfg.spare_workers, limits=limits,
                                      sandboxed=sandboxed, gates=self._gates, prefork=self.cfg.prefork)
        self.baselines = BaselineCache(self.cfg.cache_dir)
        self.refs = ReferenceCache(os.path.join(self.tmp_root, "refs"))
        self.trusted = TrustedSide(self.cfg, self.pool, self._gates, self.timing_settings, self.refs, self.baselines)
        self.memory = admission.Ledgers(self._capacity)  # device bytes promised to evaluations in flight
        self._verdicts: dict[tuple[str, str], EvalResult] = {}  # eval.reuse_verdicts: (task hash, source hash)
        self._verdict_locks: dict[tuple[str, str], threading.Lock] = {}
        self._verdicts_lock = threading.Lock()
        self._draws: dict[tuple, Draw] = {}  # the judged inputs of each task, drawn once per evaluator
        self._draw_count = 0
        self._ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dvk-ahead")  # a batch's references

    def _capacity(self, device: str) -> int:
        """What evaluations on ``device`` may be promised: its free memory as a reference
        process saw it at start-up, less a context for each other process of the pool there."""
        with self.pool.reference(device) as ref:
            free = ref.info.get("free_bytes")
        if not free:
            return 1 << 62  # unknown: admit everything, as before admission existed
        return admission.capacity(int(free), self.pool.processes(device))

    # ------------------------------------------------------------------ public
    @property
    def sandbox_description(self) -> str:
        """The ``eval.sandbox`` mode and what this machine gave workers (run.json's provenance)."""
        if self.cfg.sandbox == "off":
            return "off (plain worker processes)"
        return f"{self.cfg.sandbox}: {sandbox.probe().describe()}"

    @property
    def n_workers(self) -> int:
        return len(self.pool)

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        ahead = getattr(self, "_ahead", None)
        if ahead is not None:
            ahead.shutdown(wait=True, cancel_futures=True)
        self.pool.close()
        sandbox.remove_tree(self.tmp_root)

    def evaluate(self, task: Task, source: Optional[str] = None, fresh: bool = False) -> EvalResult:
        """Judge ``source`` on ``task``. With ``eval.self_check`` (or no source) the
        candidate is the problem's own Model: see ``self_candidate``. ``fresh``: judged anew
        even with ``eval.reuse_verdicts`` (a skill's verification), and not kept for reuse."""
        t0 = time.monotonic()
        if self.cfg.self_check or source is None:
            source = self_candidate(task.source)
        if not self.cfg.reuse_verdicts or fresh:
            return self._judged(task, source, t0)
        key = batch.verdict_key(task, source)
        with self._verdicts_lock:
            lock = self._verdict_locks.setdefault(key, threading.Lock())
        with lock:  # the same source given twice at once is judged once; the other waits for it
            earlier = self._verdicts.get(key)
            if earlier is not None:
                return batch.copy_for_duplicate(earlier, t0)
            res = self._judged(task, source, t0)
            if batch.reusable(res):
                self._verdicts[key] = copy.deepcopy(res)
            return res

    def remember(self, task: Task, source: str, result: EvalResult) -> None:
        """With ``eval.reuse_verdicts``: take ``result`` as the verdict of ``source`` on ``task``
        (a verdict this harness gave in an earlier process, e.g. an earlier call of a long run)."""
        with self._verdicts_lock:
            self._verdicts[batch.verdict_key(task, source)] = copy.deepcopy(result)

    def _judged(self, task: Task, source: str, t0: float) -> EvalResult:
        def once(salt: int) -> EvalResult:
            try:
                r = self._evaluate(task, source, salt)
            except Exception as e:  # noqa: BLE001 - a harness bug must not kill a training run
                r = EvalResult(task=task.name, level=task.level, device=self.device, stage="harness",
                               error_kind="harness_error", error_msg=f"{type(e).__name__}: {e}")
            if self.cfg.self_check:  # waived first: what is left decides a re-timing and a re-verification
                r.self_check = True
                waive(r)
            return r

        res = once(0)
        if not str(res.device).startswith("cuda"):
            res.warnings.append(CPU_UNTIMED)
        retry.second_opinions(res, once, self.cfg.implausible_speedup, lambda: self.trusted.remeasure(task))
        res.correct = (res.trials > 0 and res.trials_passed == res.trials and not res.error_kind
                       and not res.flags and res.verifiable)
        res.eval_seconds = time.monotonic() - t0
        res.feedback = feedback_mod.build(res)
        return res

    def evaluate_fresh(self, items: list[tuple[Task, str]],
                       progress: Optional[Callable[[int, EvalResult], None]] = None) -> list[EvalResult]:
        """``evaluate_many`` with every verdict judged anew (``evaluate(..., fresh=True)``)."""
        return self.evaluate_many(items, progress, fresh=True)

    def evaluate_many(self, items: list[tuple[Task, str]],
                      progress: Optional[Callable[[int, EvalResult], None]] = None,
                      fresh: bool = False) -> list[EvalResult]:
        """Evaluate concurrently (one thread per slot); results in input order. The same
        source given more than once for a task is judged once (``batch.py``: its duplicates
        get a copy of the verdict, marked ``reused``), unless ``fresh`` asks every item judged."""
        results: list[Optional[EvalResult]] = [None] * len(items)
        t0 = time.monotonic()
        leaders = {i: [] for i in range(len(items))} if fresh else batch.group(items)

        def one(i: int) -> None:
            results[i] = self.evaluate(*items[i], fresh=fresh)
            if progress is not None:
                progress(i, results[i])
            for d in leaders[i]:  # duplicates: the verdict copied, or judged anew after a transient failure
                results[d] = (batch.copy_for_duplicate(results[i], t0) if batch.reusable(results[i])
                              else self.evaluate(*items[d], fresh=fresh))
                if progress is not None:
                    progress(d, results[d])

        stop = threading.Event()  # the references prepared ahead stop with the batch
        prepare = getattr(self, "_ahead", None)  # absent in an evaluator made without processes (tests)
        ahead = (prepare.submit(self._prepare_tasks, [items[i] for i in leaders], stop)
                 if prepare is not None and len(items) > 1 and self._prepares_ahead() else None)
        ex = ThreadPoolExecutor(max_workers=max(1, self.n_workers))
        futures = [ex.submit(one, i) for i in leaders]
        pending = set(futures)
        try:
            while pending:  # a timed wait: a Ctrl-C the kernel delivered to another thread is taken here
                _, pending = wait(pending, timeout=0.25)
        except KeyboardInterrupt:
            stop.set()
            ex.shutdown(wait=False, cancel_futures=True)  # nothing new starts; the caller closes the evaluator
            raise
        stop.set()
        if ahead is not None:
            wait([ahead])
        ex.shutdown()
        for f in futures:
            f.result()
        return results  # type: ignore[return-value]

    # ------------------------------------------------------------------ core
    def _evaluate(self, task: Task, source: str, salt: int) -> EvalResult:
        """One evaluation on inputs drawn for it (``salt`` 0: the task's draw for this
        evaluator, shared by its candidates; others: a fresh draw for a second opinion)."""
        cfg = self.cfg
        res = EvalResult(task=task.name, level=task.level, device=self.device)
        rep = static.check(source, policy=cfg.code_policy != "off" and not cfg.self_check)
        res.backend = rep.backend
        if not rep.ok:
            res.stage, res.error_kind, res.error_msg = "static", rep.error_kind, rep.error_msg
            return res
        hard = [f for f in rep.flags if f in static.HARD_STATIC_FLAGS
                and not (cfg.self_check and f in SELF_CHECK_WAIVED)]
        if hard:
            res.stage, res.error_kind = "static", "rejected"
            res.flags = hard
            res.error_msg = "; ".join(rep.notes)
            return res
        if rep.backend == "cuda" and not self.on_gpu:
            res.stage, res.error_kind = "compile", "unsupported_on_cpu"
            res.error_msg = "CUDA C++ candidates (load_inline) need a GPU: run with --device cuda"
            return res
        try:
            overrides, variant, perturb = _variant(task.source, not self.on_gpu and cfg.cpu_small_shapes,
                                                   cfg.perturb_shapes)
        except SyntaxError as e:  # the problem file is not Python: the problem is broken, not the candidate
            res.stage, res.error_kind = "problem", "reference_error"
            res.error_msg = f"the problem does not parse: line {e.lineno}: {e.msg}"
            return res
        drawn = self._draw(task, variant, perturb, salt)

        def attempt(alone: bool) -> tuple[EvalResult, bool]:
            r = EvalResult(task=task.name, level=task.level, device=self.device, backend=rep.backend)
            shared = self._admitted(task, variant, source, overrides, drawn, rep, r, alone)
            return r, shared

        first, shared = attempt(False)
        return retry.alone_if_out_of_memory(first, shared, lambda: attempt(True)[0])

    def _draw(self, task: Task, variant: str, perturb: dict, salt: int) -> Draw:
        """The judged inputs: one draw per task and evaluator (its candidates share the
        references), a fresh one for each second opinion."""
        key = (task.hash, hashlib.sha256(variant.encode()).hexdigest(), salt)
        with self._verdicts_lock:
            if salt == 0 and key in self._draws:
                return self._draws[key]
            self._draw_count += 1
            got = draws.draw(task.hash, self.cfg.trials, variant if perturb["judged"] else None, perturb["odd"],
                             self.cfg.input_seed, salt=salt if salt == 0 else salt * 1000 + self._draw_count)
            if salt == 0:
                self._draws[key] = got
            return got

    def _admitted(self, task: Task, variant: str, source: str, overrides: dict, drawn: Draw,
                  rep: static.StaticReport, res: EvalResult, alone: bool) -> bool:
        """A fresh worker, the task's memory admission (or the whole device, ``alone``), then
        the judging. True when other evaluations could hold memory of the device meanwhile."""
        clock = _Clock(res.phase_seconds)
        device = self._one_device()
        if device is not None:  # asked before a worker waits on it
            self.trusted.sizes(variant, device)
            clock.mark("sizes")
        try:
            slot, w = self.pool.acquire()
        except Exception as e:  # noqa: BLE001
            res.stage, res.error_kind, res.error_msg = "harness", "no_worker", f"no worker became ready: {e}"
            return False
        res.sandbox = w.sandbox_desc
        res.device = w.device or res.device
        kernels = getattr(self.pool, "kernels", None) if self.on_gpu else None
        if kernels is not None:  # what an earlier worker built for this very source
            kernels.give(kernelcache.source_key(source), w.triton_cache, w.uid)
        clock.mark("acquire")
        try:
            sizes = self.trusted.sizes(variant, w.device)
            params = sizes.param_bytes if sizes else 0
            need = None if alone else self._need(sizes)
            ledger = self.memory(w.device)
            with ledger.hold(need) as granted:  # until the worker is gone
                clock.mark("admission")
                try:
                    data = max(1, granted - 2 * params)  # what timing may plan for: its two models are already there
                    self._judge(task, variant, source, overrides, drawn, w, res, rep, clock,
                                data if self.on_gpu else 0, learn_sizes=sizes is None)
                finally:
                    self._let_go(slot, w, kernels if res.compiled else None, source)
                    w = None
            return granted < ledger.capacity and len(self.pool) > 1
        finally:
            if w is not None:  # admission itself failed
                self.pool.release(slot, w)

    def _need(self, sizes: Optional[memplan.Sizes]) -> Optional[int]:
        """The device bytes an evaluation of a task of these sizes is admitted with (None: unknown)."""
        if sizes is None:
            return None
        if self.on_gpu:
            return (memplan.bound(sizes.input_bytes, sizes.output_bytes, param_bytes=sizes.param_bytes)
                    + (self.cfg.l2_flush_mb << 20))
        return memplan.bound(sizes.input_bytes, sizes.output_bytes, fixed=64 << 20, param_bytes=sizes.param_bytes)

    def _one_device(self) -> Optional[str]:
        """The device of every slot when they are all of one kind (one GPU, or the CPU), else None."""
        slots = getattr(self.pool, "slots", None) or []
        return slots[0] if slots and len({s.split(":")[0] for s in slots}) == 1 else None

    def _prepare_tasks(self, items: list[tuple[Task, Optional[str]]], stop: threading.Event) -> None:
        """Ahead of a batch's candidates, one task at a time in their order: each task's sizes,
        its reference entry for this evaluator's draw (``_draw``, salt 0: the very entry its
        candidates will be judged against) and, where candidates are timed, its clean
        baseline, on the reference processes while candidates of earlier tasks run, inside
        the task's memory admission. A candidate sends its job only once its task's baseline
        is done (``_judge`` asks for it first and waits for the one in progress), so a
        baseline is timed before its task's candidates are loaded, as when each asked for it.
        Skipped: a task none of whose candidates passes the static checks, and one that runs
        alone (of unknown size, or larger than the device's ledger); a failing reference is
        left to the task's candidates to meet."""
        device = self._one_device()
        if device is None:
            return
        policy = self.cfg.code_policy != "off" and not self.cfg.self_check
        sources: dict[str, list] = {}
        for task, source in items:
            sources.setdefault(task.hash, []).append(source)

        def runs(source: Optional[str]) -> bool:  # gets past the static checks (a task none of whose does: nothing to do)
            if source is None or self.cfg.self_check:
                return True
            try:
                rep = static.check(source, policy=policy)
            except Exception:  # noqa: BLE001 - its evaluation meets it
                return True
            return rep.ok and not set(rep.flags) & set(static.HARD_STATIC_FLAGS)

        done: set[str] = set()
        for task, _ in items:
            if stop.is_set() or task.hash in done:
                continue
            done.add(task.hash)
            if not any(runs(src) for src in sources[task.hash]):
                continue
            try:
                overrides, variant, perturb = _variant(task.source, not self.on_gpu and self.cfg.cpu_small_shapes,
                                                       self.cfg.perturb_shapes)
                drawn = self._draw(task, variant, perturb, 0)
                need = self._need(self.trusted.sizes(variant, device))
                ledger = self.memory(device)
                if need is None or ledger.grant_for(need) >= ledger.capacity or stop.is_set():
                    continue  # a task that runs alone is left to its candidates' turn
                with ledger.hold(need):
                    ref = self.trusted.reference(task, variant, overrides, drawn, device)
                    if "error" not in ref and self._wants_baseline() and not stop.is_set():
                        self.trusted.baseline(task, variant, overrides, list(drawn.trial_seeds), device)
            except Exception:  # noqa: BLE001 - its candidates meet the same failure and report it
                continue

    def _let_go(self, slot: str, w: WorkerProcess, kernels, source: str) -> None:
        """Keep what the worker built for this source (``kernels``, or None), then kill it."""
        try:
            if kernels is not None:
                w.freeze()  # stopped for good: its cache cannot change while it is copied
                kernels.keep(kernelcache.source_key(source), w.triton_cache, w.uid)
        except OSError:
            pass  # a cache not kept costs the next run of this source its build time, nothing else
        finally:
            self.pool.release(slot, w)

    def _judge(self, task: Task, variant: str, source: str, overrides: dict, drawn: Draw, w: WorkerProcess,
               res: EvalResult, rep: static.StaticReport, clock: _Clock, memory_bytes: int, learn_sizes: bool) -> None:
        """Reference, baseline, then the candidate's own check and timing, inside its admission.
        The baseline is timed before the candidate's code is loaded: no work of the candidate
        is on the device while the figure it is held to is measured."""
        cfg = self.cfg
        try:
            ref = self.trusted.reference(task, variant, overrides, drawn, w.device)
            clock.mark("reference")
            if "error" in ref:
                kind = ref.get("error_kind", "reference_error")
                # too_large: the device's limit; anything else: the problem itself is broken
                res.stage = "reference" if kind == "too_large" else "problem"
                res.error_kind, res.error_msg = kind, ref["error"]
                return
            res.judged_inputs = drawn.record(ref.get("perturb_used"))
            if learn_sizes:
                self.trusted.learn_sizes(variant, w.device, ref)
            base = (self.trusted.baseline(task, variant, overrides, list(drawn.trial_seeds), w.device)
                    if self._wants_baseline() else None)
            clock.mark("baseline")
            job = CandidateJob(task_source=variant, candidate_source=source, trials=len(drawn.trial_seeds),
                               init_seed=cfg.seed, device=w.device, out_meta=ref.get("out_meta") or [],
                               other_sizes=bool(ref.get("perturb_used") or ref.get("odd_used")),
                               timed_checks=len(drawn.timed_checks),
                               input_bytes=int(ref.get("input_bytes") or 0),
                               output_bytes=int(ref.get("output_bytes") or 0), memory_bytes=memory_bytes,
                               ref_init_work=ref.get("ref_init_work"), timing=self.timing_settings)
            self._run(Conversation(self, w, res, drawn, ref, clock), job, rep, base)
        except WorkerTimeout as e:
            res.error_kind = "timeout"
            res.error_msg = (f"{res.stage} did not finish: {e} (limits: eval.compile_timeout_s={cfg.compile_timeout_s:g} "
                             f"for loading and building, eval.run_timeout_s={cfg.run_timeout_s:g} for each later "
                             f"step, and their sum for the whole evaluation)")
        except ProtocolError as e:
            res.error_kind, res.error_msg = "protocol_error", f"the worker broke the protocol: {e}"
        except WorkerDied as e:
            res.error_kind = "cuda_error" if self.on_gpu and "signal" not in str(e) else "worker_crash"
            res.error_msg = str(e)
            if res.stage == "perturbation":
                judge.flag(res, [("shape_hardcoding", "the worker crashed at perturbed sizes (out-of-bounds access?)")])
                res.stage = "correctness"

    def _prepares_ahead(self) -> bool:
        """Whether a batch prepares its tasks' references ahead (``_prepare_tasks``): on a GPU,
        where a reference process works on the device while candidate workers wait for it;
        on the CPU both share the same cores, and doing the work earlier saves nothing."""
        return self.on_gpu

    def _wants_baseline(self) -> bool:
        """Whether candidates are timed here, and so need the reference's clean baseline."""
        return self.on_gpu and self.cfg.timing

    def _run(self, talk: Conversation, job: CandidateJob, rep: static.StaticReport, base: Optional[dict]) -> None:
        """The candidate's checks, then (GPU, all correct) its timing; the verdict's facts into
        ``talk.res``. A report whose fields do not read as the protocol says (a list where a
        name belongs) is the worker's ``protocol_error``, never the harness's failure."""
        try:
            self._judge_reports(talk, job, rep, base)
        except _UNREADABLE as e:
            raise ProtocolError(f"a report does not read: {type(e).__name__}: {str(e)[:200]}") from None

    def _judge_reports(self, talk: Conversation, job: CandidateJob, rep: static.StaticReport,
                       base: Optional[dict]) -> None:
        cfg, res, ref = self.cfg, talk.res, talk.ref
        out = talk.check(job)
        if res.stage == "perturbation":
            res.stage = "correctness"
        if out.get("stage") == "reference":  # the worker could not build the problem's inputs or Model
            res.stage, res.error_kind = "problem", "reference_error"
            res.error_msg = str(out.get("error_msg", ""))[:3000]
            return
        res.compiled = bool(out.get("compiled"))
        if worker_failure(res, out):
            return
        judge.correctness(res, out, talk.cand, ref, rep.backend, rep.kernels, cfg, self.on_gpu,
                          facts=kernelwork.analyze(job.candidate_source))
        if cfg.self_check:  # the reference has no custom kernel: those flags must not stop its timing
            waive(res)
        talk.clock.mark("compare")
        if not (self.on_gpu and cfg.timing and res.trials_passed == res.trials and not res.flags
                and not res.error_kind):
            if not res.error_kind and not res.flags:
                res.stage = "done"
            return
        res.stage = "timing"
        tout, wall_ms = talk.time()
        if worker_failure(res, tout):
            return
        judge.add_worker_flags(res, tout)
        judge.timing(res, tout, talk.cand, ref, rep.backend, rep.kernels, base, wall_ms, cfg,
                     checks=talk.drawn.timed_checks)
        judge.light(res, ref, self.trusted.peaks(job.device))  # below every other timing defence
        res.stage = "done"


class _Clock:
    """Adds the seconds since the last mark to ``phases[name]``."""

    def __init__(self, phases: dict):
        self.phases, self.t = phases, time.monotonic()

    def mark(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self.t, 4)
        self.t = now


@functools.lru_cache(maxsize=256)
def _variant(source: str, small: bool, perturb: bool) -> tuple[dict, str, dict]:
    """(size overrides, problem source at those sizes, {"judged": perturbations to try,
    "odd": odd sizes for the generality note}), once per task."""
    overrides = cpu_overrides(source) if small else {}
    variant = apply_overrides(source, overrides)
    return overrides, variant, ({"judged": perturbations(variant), "odd": odd_sizes(variant)} if perturb
                                else {"judged": [], "odd": []})


def evaluate(task: Task, source: str, cfg: Optional[EvalConfig] = None) -> EvalResult:
    """One-shot evaluation with a private single-slot pool."""
    with Evaluator(cfg, workers=1) as ev:
        return ev.evaluate(task, source)
