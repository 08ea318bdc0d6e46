"""Judging one candidate on one task: the harness-side half of the evaluation.

Covers: static checks, choosing the size variant (the task's CPU_SHAPES on CPU), the
message protocol with a worker (reference → load → check → [time]), deadlines
(compile and run timeouts kill the worker), comparison of outputs in this process,
the flag rules of guards.py, cached reference outputs and baselines, re-verification
of implausible speedups in a fresh worker, and the feedback text. ``Evaluator`` owns a
pool and evaluates many candidates concurrently. Never raises on candidate code.
Does not cover: running candidate code (worker.py) — this process never imports it.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

from ..config import EvalConfig
from ..records import EvalResult, KernelTime, Task, sha16
from ..tasks.shapes import apply_overrides, cpu_overrides, perturbations
from . import feedback as feedback_mod
from . import guards, static
from .baselines import BaselineCache, vs_compile
from .correctness import compare
from .gate import Gates
from .pool import CPU_THREADS, LocalPool, WorkerDied, WorkerHandle, WorkerTimeout, default_slots, resolve_device
from .transfer import read_leaf, shm_root

_REF_CACHE_MAX = 64


class Evaluator:
    """A pool of workers plus the judging logic. Use as a context manager."""

    def __init__(self, cfg: Optional[EvalConfig] = None, workers: Optional[int] = None,
                 pool: Optional[LocalPool] = None):
        self.cfg = cfg or EvalConfig()
        self.device = resolve_device(self.cfg.device)
        self.on_gpu = self.device.startswith("cuda")
        if self.on_gpu:  # comparisons are small: a thread per core only waits on busy cores (pool.CPU_THREADS)
            import torch

            torch.set_num_threads(min(torch.get_num_threads(), CPU_THREADS))
        self.pool = pool or LocalPool(default_slots(self.device, workers, self.cfg.workers_per_gpu),
                                      max_jobs_per_worker=self.cfg.max_jobs_per_worker,
                                      spares=self.cfg.spare_workers if self.on_gpu else 0)
        self.baselines = BaselineCache(self.cfg.cache_dir)
        self._gates = Gates()  # several workers per GPU: they check side by side, but time alone
        self._ref_cache: dict = {}
        self._ref_lock = threading.Lock()
        self.tmp_root = tempfile.mkdtemp(prefix="dvk-eval-", dir=shm_root())
        self.ext_root = os.path.join(os.path.expanduser(self.cfg.cache_dir), "torch_extensions")

    # ------------------------------------------------------------------ public
    @property
    def n_workers(self) -> int:
        return len(self.pool)

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.pool.close()
        shutil.rmtree(self.tmp_root, ignore_errors=True)

    def evaluate(self, task: Task, source: str) -> EvalResult:
        t0 = time.monotonic()
        try:
            res = self._evaluate(task, source, seed_offset=0)
        except Exception as e:  # noqa: BLE001 - a harness bug must not kill a training run
            res = EvalResult(task=task.name, level=task.level, device=self.device, stage="harness",
                             error_kind="harness_error", error_msg=f"{type(e).__name__}: {e}")
        if res.speedup is not None and not res.flags and res.speedup > self.cfg.implausible_speedup:
            t1 = time.monotonic()
            self._reverify(task, source, res)
            res.phase_seconds["reverify"] = round(time.monotonic() - t1, 4)
        res.correct = (res.trials > 0 and res.trials_passed == res.trials and not res.error_kind
                       and not res.flags and res.verifiable)
        res.eval_seconds = time.monotonic() - t0
        res.feedback = feedback_mod.build(res)
        return res

    def evaluate_many(self, items: list[tuple[Task, str]],
                      progress: Optional[Callable[[int, EvalResult], None]] = None) -> list[EvalResult]:
        """Evaluate concurrently (one thread per worker); results in input order."""
        results: list[Optional[EvalResult]] = [None] * len(items)

        def one(i: int) -> None:
            results[i] = self.evaluate(*items[i])
            if progress is not None:
                progress(i, results[i])

        with ThreadPoolExecutor(max_workers=max(1, self.n_workers)) as ex:
            list(ex.map(one, range(len(items))))
        return results  # type: ignore[return-value]

    # ------------------------------------------------------------------ core
    def _evaluate(self, task: Task, source: str, seed_offset: int, fresh: bool = False) -> EvalResult:
        cfg = self.cfg
        res = EvalResult(task=task.name, level=task.level, device=self.device)
        rep = static.check(source)
        res.backend = rep.backend
        if not rep.ok:
            res.stage, res.error_kind, res.error_msg = "static", rep.error_kind, rep.error_msg
            return res
        hard = [f for f in rep.flags if f in static.HARD_STATIC_FLAGS]
        if hard:
            res.stage, res.error_kind = "static", "rejected"
            res.flags = hard
            res.error_msg = "; ".join(rep.notes)
            return res
        if rep.backend == "cuda" and not self.on_gpu:
            res.stage, res.error_kind = "compile", "unsupported_on_cpu"
            res.error_msg = "CUDA C++ candidates (load_inline) need a GPU: run with --device cuda"
            return res

        overrides, variant, perturb = _variant(task.source, not self.on_gpu and cfg.cpu_small_shapes,
                                               cfg.perturb_shapes)
        seeds = [cfg.seed + 1000 * (i + 1) + seed_offset for i in range(cfg.trials)]
        key = (task.hash, json.dumps(overrides, sort_keys=True), self.device.split(":")[0], tuple(seeds),
               json.dumps(perturb, sort_keys=True), cfg.seed)
        with self._ref_lock:
            cached = self._ref_cache.get(key)
        job_id = uuid.uuid4().hex[:12]
        shm_dir = os.path.join(self.tmp_root, job_id)
        os.makedirs(shm_dir)
        job = {
            "job_id": job_id, "task_source": variant, "candidate_source": source, "seeds": seeds,
            "init_seed": cfg.seed, "need_ref": cached is None, "out_meta": cached["out_meta"] if cached else None,
            "perturb": [cached["perturb_used"]] if cached and cached.get("perturb_used") else perturb,
            "perturb_seed": cfg.seed + 7, "need_ref_perturb": cached is None or not cached.get("perturb_used"),
            "shm_dir": shm_dir, "ext_dir": os.path.join(self.ext_root, sha16(source)),
            **_timing_params(cfg),
        }
        try:
            h = self.pool.acquire()
        except Exception as e:  # noqa: BLE001
            res.stage, res.error_kind, res.error_msg = "harness", "no_worker", f"no worker became ready: {e}"
            return res
        recycle = fresh
        clock = _Clock(res.phase_seconds)
        try:
            if fresh:  # a process that has never run a job, for re-verification
                h = self.pool.fresh(h)
            res.device = h.device or res.device  # the GPU that ran it
            clock.mark("acquire")
            base = self._baseline(h, task, variant, overrides, seeds) if (self.on_gpu and cfg.timing) else None
            clock.mark("baseline")
            recycle = self._run(h, job, task, res, rep, cached, key, base, clock)
        except WorkerTimeout as e:
            res.error_kind = "timeout"
            res.error_msg = f"{res.stage} did not finish: {e} (limit from eval.compile_timeout_s / eval.run_timeout_s)"
            recycle = True
        except WorkerDied as e:
            res.error_kind = "cuda_error" if self.on_gpu and "signal" not in str(e) else "worker_crash"
            res.error_msg = str(e)
            if res.stage == "perturbation":
                self._flag(res, [("shape_hardcoding", "the worker crashed at perturbed sizes (out-of-bounds access?)")])
                res.stage = "correctness"
            recycle = True
        finally:
            self.pool.release(h, recycle=recycle)
            shutil.rmtree(shm_dir, ignore_errors=True)
        return res

    def _baseline(self, h: WorkerHandle, task: Task, variant: str, overrides: dict, seeds: list[int]) -> Optional[dict]:
        key = BaselineCache.key(task.hash, overrides, h.info.get("gpu", "?"), h.info.get("torch", "?"),
                                _method_extra(self.cfg))
        got = self.baselines.get(key)
        if got is not None:
            return got
        with self._gates(h.device).exclusive():
            h.send({"cmd": "baseline", "job": {"job_id": "baseline", "task_source": variant, "seeds": seeds[:3],
                                               "init_seed": self.cfg.seed, "device": h.device,
                                               **_timing_params(self.cfg)}})
            msg = h.recv(self.cfg.compile_timeout_s + self.cfg.run_timeout_s)
        value = msg.get("result", {})
        if "eager_ms" in value:
            self.baselines.put(key, value)
        return value

    def _run(self, h: WorkerHandle, job: dict, task: Task, res: EvalResult, rep: static.StaticReport,
             cached: Optional[dict], key: tuple, base: Optional[dict], clock: "_Clock") -> bool:
        """Drive one job on a worker. Returns True when the worker must be replaced."""
        cfg = self.cfg
        job["device"] = h.device
        gate = self._gates(h.device)
        with gate.shared():  # checking: other workers on this GPU may check too, none may time
            clock.mark("gate")
            h.send({"cmd": "job", "job": job})
            res.stage = "reference"
            out = None
            while out is None:
                limit = cfg.compile_timeout_s if res.stage == "compile" else cfg.run_timeout_s
                msg = h.recv(limit)
                clock.mark(res.stage)
                ev = msg.get("event")
                if ev == "ref_done":
                    res.stage = "compile"
                elif ev == "loaded":
                    res.stage = "correctness"
                elif ev == "phase":
                    res.stage = msg["phase"]
                elif ev == "checked":
                    out = msg["result"]
                    if res.stage == "perturbation":
                        res.stage = "correctness"
            if out.get("stage") == "reference":
                res.stage, res.error_kind, res.error_msg = "reference", out["error_kind"], out["error_msg"]
                return True
            if cached is None:
                cached = self._store_reference(key, out)
            elif not cached.get("perturb_used") and "pref" in out.get("leaves", {}):
                cached = self._store_perturbed(cached, out)  # an earlier candidate stopped before the re-check
            self._fetch_samples(h, out, res.phase_seconds)
            clock.mark("transfer")
        res.compiled = bool(out.get("compiled"))
        if out.get("error_kind"):
            res.stage = out.get("stage", res.stage)
            res.error_kind, res.error_msg = out["error_kind"], out.get("error_msg")
            if out.get("cuda_broken"):
                res.error_kind = "cuda_error"
            self._add_flags(res, out)
            return True
        self._judge_correctness(res, out, cached, rep)
        clock.mark("compare")
        recycle = bool(res.flags) or bool(out.get("dirty"))
        want_timing = self.on_gpu and cfg.timing and res.trials_passed == res.trials and not res.flags
        if not want_timing:
            h.send({"cmd": "done"})
            if not res.error_kind and not res.flags:
                res.stage = "done"
            return recycle
        with gate.exclusive():  # timing: this GPU runs nothing else meanwhile
            clock.mark("gate")
            h.send({"cmd": "time"})
            res.stage = "timing"
            msg = h.recv(cfg.run_timeout_s)
            clock.mark("timing")
        tout = msg.get("result", {})
        with gate.shared():  # sampling the timed outputs is checking: the GPU is free for the next timing
            clock.mark("gate")
            self._fetch_samples(h, tout, res.phase_seconds)
            clock.mark("transfer")
        _add_worker_seconds(res.phase_seconds, tout.get("worker_seconds"))  # its split of the timing phase
        h.send({"cmd": "done"})
        if tout.get("error_kind"):
            res.error_kind, res.error_msg = tout["error_kind"], tout.get("error_msg")
            return True
        self._add_flags(res, tout)
        self._judge_timing(res, tout, cached, rep, base)
        res.stage = "done"
        return recycle or bool(res.flags) or bool(tout.get("dirty"))

    def _fetch_samples(self, h: WorkerHandle, out: dict, phases: dict) -> None:
        """Large GPU outputs: name a fresh random seed now that they exist; receive the sample
        (and the worker's split of that time, as ``phases["worker.sample_*"]``)."""
        leaves = out.get("leaves", {})
        if not any(m.get("kind") == "pending" for metas in leaves.values() for m in metas):
            return
        import secrets

        h.send({"cmd": "sample", "seed": secrets.randbits(62)})
        msg = h.recv(self.cfg.run_timeout_s)
        _add_worker_seconds(phases, msg.get("seconds"))
        for key, by_index in msg.get("leaves", {}).items():
            for i, meta in by_index.items():
                leaves[key][int(i)] = meta

    # ------------------------------------------------------------------ judging
    def _store_reference(self, key: tuple, out: dict) -> dict:
        """Cache the reference outputs of a task: their files move out of the job's folder
        into the cache's own and are mapped, not copied (5 trials of a 512 MB output would
        otherwise be read into fresh harness memory). Returns the entry to judge with.

        When two workers computed the same task at once, the first entry stays: jobs
        started since may hold it (and add the shape re-check's outputs to it later), and
        the same seeds give the same reference outputs either way."""
        leaves = out.get("leaves", {})
        with self._ref_lock:
            have = self._ref_cache.get(key)
        if have is not None:
            return self._store_perturbed(have, out) if "pref" in leaves and not have.get("perturb_used") else have
        home = os.path.join(self.tmp_root, "refs", uuid.uuid4().hex[:12])
        os.makedirs(home)
        keep = _keeper(home)
        entry = {
            "refs": [[keep(m) for m in leaves[f"ref{i}"]] for i in range(len(leaves)) if f"ref{i}" in leaves],
            "home": home,
            "out_meta": leaves.get("ref0"),
            "pref": [keep(m) for m in leaves["pref"]] if "pref" in leaves else None,
            "perturb_used": out.get("perturb_used") if "pref" in leaves else None,
            "ref_work": out.get("ref_work"), "ref_mutates": out.get("ref_mutates", False),
            "ref_aliases": out.get("ref_aliases", False),
        }
        with self._ref_lock:
            twin = self._ref_cache.get(key)  # stored while this one was being built
            if twin is None:
                if len(self._ref_cache) >= _REF_CACHE_MAX:
                    old = self._ref_cache.pop(next(iter(self._ref_cache)))
                    shutil.rmtree(old["home"], ignore_errors=True)  # mapped pages live on until unmapped
                self._ref_cache[key] = entry
                return entry
        shutil.rmtree(home, ignore_errors=True)  # ours stays usable: its tensors are mapped
        if entry["pref"] is not None and not twin.get("perturb_used"):
            with self._ref_lock:
                if not twin.get("perturb_used") and os.path.isdir(twin["home"]):
                    twin["pref"], twin["perturb_used"] = entry["pref"], entry["perturb_used"]
        return twin if twin.get("perturb_used") or entry["pref"] is None else entry

    def _store_perturbed(self, entry: dict, out: dict) -> dict:
        """Add a job's shape re-check outputs to a cached entry that lacks them (an earlier
        candidate stopped before the re-check). Returns the entry to judge with: if the
        entry left the cache meanwhile (its folder is gone), a copy with this job's own
        outputs, uncached."""
        with self._ref_lock:
            if entry.get("perturb_used"):  # another job added them first
                return entry
            if os.path.isdir(entry["home"]):
                keep = _keeper(entry["home"])
                entry["pref"] = [keep(m) for m in out["leaves"]["pref"]]
                entry["perturb_used"] = out.get("perturb_used")
                return entry
        own = [read_leaf(m) for m in out["leaves"]["pref"]]
        return {**entry, "pref": own, "perturb_used": out.get("perturb_used")}

    def _add_flags(self, res: EvalResult, out: dict) -> None:
        for f in out.get("flags", []):
            if f not in res.flags:
                res.flags.append(f)
        notes = [n for n in out.get("notes", []) if n.split(":", 1)[0] in res.flags]
        if notes:
            res.error_msg = "; ".join(filter(None, [res.error_msg] + notes))

    def _flag(self, res: EvalResult, hits: list[tuple[str, str]]) -> None:
        for name, why in hits:
            if name not in res.flags:
                res.flags.append(name)
                res.error_msg = "; ".join(filter(None, [res.error_msg, f"{name}: {why}"]))

    def _judge_correctness(self, res: EvalResult, out: dict, ref: dict, rep: static.StaticReport) -> None:
        cfg = self.cfg
        leaves = out.get("leaves", {})
        # the reference's own leaves ("ref*", "pref") are in the cache already: never read them twice
        cand = {k: [read_leaf(m) for m in v] for k, v in leaves.items() if not k.startswith(("ref", "pref"))}
        res.trials = len(ref["refs"])
        worst_abs, worst_rel, worst_l2, f32, low_bits = 0.0, 0.0, 0.0, False, 0.0
        for i, r in enumerate(ref["refs"]):
            c = compare(*_aligned(r, cand.get(f"cand{i}", [])), cfg.atol, cfg.rtol)
            low_bits = max(low_bits, c.low_mantissa_share)
            worst_abs, worst_rel = max(worst_abs, c.max_abs), max(worst_rel, c.max_rel)
            worst_l2, f32 = max(worst_l2, c.rel_l2), f32 or c.float32
            if not c.ok:
                res.error_kind, res.error_msg = c.error_kind, f"trial {i + 1}: {c.message}"
                if _stale(cand.get(f"cand{i}"), [cand.get(f"cand{j}") for j in range(i)]):
                    self._flag(res, [("result_caching", f"trial {i + 1} returned an earlier trial's output")])
                break
            res.trials_passed += 1
        res.max_abs_diff, res.max_rel_diff, res.rel_l2_error = worst_abs, worst_rel, worst_l2
        self._add_flags(res, out)
        # Same inputs, different allocator poison: differing outputs read uninitialized memory.
        if "determinism0" in cand and "cand0" in cand:
            d = compare(_values(cand["cand0"]), _values(cand["determinism0"]), cfg.atol, cfg.rtol)
            if not d.ok and d.error_kind in ("wrong_output", "nan_inf"):
                self._flag(res, [("uninitialized_memory", "two runs on the same inputs differ: " + d.message)])
        # Checked whatever the comparison said: an aliased output can look wrong only because
        # the worker refilled the input it lives in before the harness sampled it.
        if out.get("cand_mutates") and not ref.get("ref_mutates"):
            self._flag(res, [("input_mutation", "an input tensor changed during forward")])
        if out.get("cand_aliases") and not ref.get("ref_aliases"):
            self._flag(res, [("returns_input", "an output tensor lives in an input's memory")])
        if res.error_kind:
            if self._bf16_unverifiable(ref, rep, res):
                res.verifiable = False
                res.error_kind = "unverifiable_on_cpu"
                res.error_msg = "bf16 tl.dot cannot be checked by the Triton interpreter; evaluate on a GPU"
            return
        if "recheck1" in cand and len(ref["refs"]) > 1:
            if not compare(*_aligned(ref["refs"][1], cand["recheck1"]), cfg.atol, cfg.rtol).ok:
                self._flag(res, [("result_caching", "refilling the same input buffers with new values gave a wrong result")])
        if ref.get("perturb_used"):
            if out.get("perturb_error"):
                self._flag(res, [("shape_hardcoding", f"at sizes {ref['perturb_used']}: {out['perturb_error']}")])
            elif "pcand" in cand:
                p = compare(*_aligned(ref["pref"], cand["pcand"]), cfg.atol, cfg.rtol)
                if not p.ok:
                    self._flag(res, [("shape_hardcoding", f"at sizes {ref['perturb_used']}: {p.message}")])
        elif self.cfg.perturb_shapes:
            res.warnings.append("perturbation_skipped: no perturbed size was valid for the reference")
        launches = int(out.get("custom_launches", 0))
        res.custom_launches = launches
        if rep.backend != "cuda":  # CUDA launches are seen by the GPU profile (timing phase)
            self._flag(res, guards.kernel_flags(launches, rep.kernels, rep.backend, self.on_gpu))
        est = None
        if ref.get("ref_work") and out.get("cand_work") is not None:
            from .profile import work_coverage

            est = work_coverage(ref["ref_work"], out["cand_work"])
        if not self.on_gpu:
            res.coverage = est
            if est is not None:
                res.warnings.append("coverage_estimated: share of the reference's work not left to torch ops")
        if "no_custom_kernel" not in res.flags and "decoy_kernel" not in res.flags:
            self._flag(res, guards.coverage_flag(est, cfg.min_coverage, "custom kernels do an estimated"))
        self._flag(res, guards.precision_flag(worst_l2, f32, cfg.precision_rel_l2, low_bits))

    def _bf16_unverifiable(self, ref: dict, rep: static.StaticReport, res: EvalResult) -> bool:
        if self.on_gpu or rep.backend != "triton":
            return False
        metas = ref.get("out_meta") or []
        return any(m.get("dtype") == "bfloat16" for m in metas) and res.error_kind == "wrong_output"

    def _judge_timing(self, res: EvalResult, out: dict, ref: dict, rep: static.StaticReport, base: Optional[dict]) -> None:
        cfg = self.cfg
        t = out.get("timing")
        if not t:
            return
        leaves = out.get("leaves", {})
        for k, metas in leaves.items():
            if k.startswith("timed"):
                i = int(k[5:])
                c = compare(*_aligned(ref["refs"][i], [read_leaf(m) for m in metas]), cfg.atol, cfg.rtol)
                if not c.ok:
                    self._flag(res, [("inconsistent_under_timing", c.message)])
        res.timing_available = True
        res.runtime_ms = t["cand"]["median"]
        res.runtime_spread = t["cand"]["spread"]
        res.ref_runtime_ms = t["ref"]["median"]
        res.speedup = t["speedup"]
        res.timing_detail = {k: t[k] for k in ("iters", "placements", "block_speedups", "wall_excess_vs_ref_ms",
                                               "sync_overhead_ms", "lead_us", "warmup_ms", "clock_mhz", "flush")
                             if k in t}
        res.timing_detail["ref_spread"] = t["ref"]["spread"]
        if base and base.get("eager_ms") and base.get("compile_ms"):
            res.compile_runtime_ms, res.speedup_compile = vs_compile(
                res.speedup, base["eager_ms"], base["compile_ms"], res.ref_runtime_ms)
        self._flag(res, guards.side_stream_flag(t, cfg.wall_event_ratio))
        self._flag(res, guards.reference_slowed_flag(res.ref_runtime_ms, (base or {}).get("eager_ms")))
        prof = out.get("kernels") or {}
        res.timing_detail["profiled_ms_per_call"] = prof.get("total_ms_per_call")
        res.timing_detail["profiled_streams"] = prof.get("streams")
        self._flag(res, guards.hidden_work_flag(prof.get("total_ms_per_call"), res.runtime_ms, cfg.wall_event_ratio))
        self._flag(res, guards.stream_flag(prof.get("streams")))
        res.kernels = [KernelTime(name=k["name"], time_ms=k["time_ms"], custom=k["custom"], calls=k["calls"])
                       for k in prof.get("top", [])]
        if prof.get("coverage") is not None:
            res.coverage = prof["coverage"]
            if rep.backend == "cuda":
                res.custom_launches = max(res.custom_launches, prof.get("custom_kernels", 0))
                self._flag(res, guards.kernel_flags(res.custom_launches, rep.kernels, rep.backend, True))
            if "no_custom_kernel" not in res.flags:
                self._flag(res, guards.coverage_flag(res.coverage, cfg.min_coverage, "custom-kernel time coverage"))

    def _reverify(self, task: Task, source: str, res: EvalResult) -> None:
        again = self._evaluate(task, source, seed_offset=17, fresh=True)
        ok = (again.trials_passed == again.trials > 0 and not again.error_kind and not again.flags
              and again.speedup is not None)
        if ok and abs(math.log(again.speedup / res.speedup)) <= math.log(1.25):
            res.warnings.append(f"implausible_speedup: {res.speedup:.1f}x re-verified in a fresh worker ({again.speedup:.1f}x)")
        else:
            got = f"{again.speedup:.2f}x" if again.speedup else (again.error_kind or ",".join(again.flags) or "failed")
            self._flag(res, [("unreproducible_speedup", f"{res.speedup:.1f}x did not reproduce in a fresh worker ({got})")])


def _keeper(home: str) -> Callable[[dict], object]:
    """Reads a reference leaf for the cache: a tensor file moves into ``home`` (once, however
    many leaves name it) and is mapped, not copied."""
    moved: dict[str, str] = {}

    def keep(m: dict):
        if m.get("kind") == "tensor" and m.get("path") and not m.get("sampled"):
            if m["path"] not in moved:
                moved[m["path"]] = os.path.join(home, f"{uuid.uuid4().hex[:8]}.bin")
                os.replace(m["path"], moved[m["path"]])
            return read_leaf({**m, "path": moved[m["path"]]}, mapped=True)
        return read_leaf(m)

    return keep


class _Clock:
    """Adds the seconds since the last mark to ``phases[name]``."""

    def __init__(self, phases: dict):
        self.phases, self.t = phases, time.monotonic()

    def mark(self, name: str) -> None:
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self.t, 4)
        self.t = now


def _add_worker_seconds(phases: dict, seconds: Optional[dict]) -> None:
    """Add the seconds a worker reports for parts of a phase as ``phases["worker.<part>"]``."""
    for k, v in (seconds or {}).items():
        phases[f"worker.{k}"] = round(phases.get(f"worker.{k}", 0.0) + float(v), 4)


def _method_extra(cfg: EvalConfig) -> str:
    """Timing settings that change what a baseline measures: part of its cache key."""
    return "".join([f"lead{cfg.timing_lead_us:g}" if cfg.timing_lead_us else "",
                    f"warm{cfg.timing_warmup_ms:g}" if cfg.timing_warmup_ms else "",
                    "fill" if cfg.timing_flush == "fill" else ""])


def _timing_params(cfg: EvalConfig) -> dict:
    return {"timing_iters": cfg.timing_iters, "timing_max_iters": cfg.timing_max_iters,
            "timing_budget_s": cfg.timing_budget_s, "timing_placements": cfg.timing_placements,
            "timing_lead_us": cfg.timing_lead_us, "timing_warmup_ms": cfg.timing_warmup_ms,
            "timing_flush": cfg.timing_flush, "timing_lead_from": cfg.timing_lead_from,
            "warmup_iters": cfg.warmup_iters,
            "l2_flush_mb": cfg.l2_flush_mb, "baseline_compile": cfg.baseline_compile}


@functools.lru_cache(maxsize=256)
def _variant(source: str, small: bool, perturb: bool) -> tuple[dict, str, list]:
    """(size overrides, problem source at those sizes, perturbations to try), once per task."""
    overrides = cpu_overrides(source) if small else {}
    variant = apply_overrides(source, overrides)
    return overrides, variant, (perturbations(variant) if perturb else [])


def _values(leaves: list) -> list:
    """Sampled leaves as their 1-D sample vectors (same seed → same indices), others as they are."""
    return [x["values"] if isinstance(x, dict) and "values" in x else x for x in leaves]


@functools.lru_cache(maxsize=16)
def _sample_indices(numel: int, seed: int):
    """One fetch's indices, drawn once however many trials and re-checks compare at them."""
    import torch

    from .transfer import sample_indices

    return sample_indices(torch, numel, seed)


def _aligned(ref_leaves: list, cand_leaves: list) -> tuple[list, list]:
    """Pair reference leaves with candidate leaves; a sampled candidate leaf is compared with
    the reference at the same indices (after its full shape and dtype are checked)."""
    import torch

    refs, cands = [], []
    for i, x in enumerate(cand_leaves):
        r = ref_leaves[i] if i < len(ref_leaves) else None
        if isinstance(x, dict) and "values" in x:
            shape = tuple(x["full_shape"])
            if isinstance(r, torch.Tensor) and tuple(r.shape) == shape and r.dtype == x["values"].dtype:
                refs.append(r.reshape(-1)[_sample_indices(r.numel(), x["seed"])])
                cands.append(x["values"])
            else:  # let compare() report the shape/dtype mismatch without materializing anything
                refs.append(r)
                cands.append(torch.zeros(1, dtype=x["values"].dtype).expand(shape))
        else:
            refs.append(r)
            cands.append(x)
    refs += ref_leaves[len(cand_leaves):]
    return [r for r in refs if r is not None] if len(refs) != len(cands) else refs, cands


def _stale(out, earlier) -> bool:
    """True when ``out`` equals, bit for bit, an output returned for other inputs.

    Sampled GPU outputs of one fetch share their indices (one seed), so their samples
    compare like whole tensors."""
    import torch

    def plain(x):  # (what the values are of, the values)
        if isinstance(x, dict) and "values" in x:
            return (x["seed"], tuple(x["full_shape"])), x["values"]
        return None, x

    def same(p, t) -> bool:
        (kp, vp), (kt, vt) = plain(p), plain(t)
        return (kp == kt and isinstance(vp, torch.Tensor) and vp.shape == vt.shape and vp.dtype == vt.dtype
                and torch.equal(vp, vt))

    if not out or not all(isinstance(plain(t)[1], torch.Tensor) for t in out):
        return False
    return any(prev and len(prev) == len(out) and all(same(p, t) for p, t in zip(prev, out)) for prev in earlier)


def evaluate(task: Task, source: str, cfg: Optional[EvalConfig] = None) -> EvalResult:
    """One-shot evaluation with a private single-worker pool."""
    with Evaluator(cfg, workers=1) as ev:
        return ev.evaluate(task, source)
