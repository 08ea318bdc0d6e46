"""A candidate worker: one candidate, run inside the OS sandbox, then discarded.

Covers: loading the candidate (compile stage), correctness trials on fresh inputs from
the harness's seeds, each asked for when its trial starts, never before (allocator
poisoned with NaN first, so unwritten output shows), a
refill of the same buffers (result caching), a second run under other poison
(uninitialized memory), a run at the perturbed size the harness names when that call
starts, and, if the harness asks, timing interleaved with the problem's own Model,
recorded by kineto (each side's kernels attributed to its calls: the candidate's kernel
evidence), with the harness's timed checks (which rounds' outputs it compares) told at the
start of the timed phase. Every compared call at the task's size is audited (on the CPU on
every thread, on a GPU under kineto with CUDA activities too), so behaving only while
watched gains nothing, and a child process that ran and was
reaped within a call is flagged (one still alive at the end of a phase is, everywhere).
Every output is written as raw bytes to the worker's scratch folder and announced; the
worker then waits while the harness stops it and reads the file, so the whole output is
committed before the harness picks which elements to compare. What this process
reports besides output files (flags it raises on itself, launch counts, work, timings)
is a claim the harness cross-checks or only uses against the candidate (``judge.py``).

Does not cover: reference outputs (``reference.py`` computes those where no candidate
ever ran) or any verdict. Run as ``python -m davinci_kernel.evaluate.candidate.worker FD CONF``;
it serves exactly one job.
"""

from __future__ import annotations

import os
import resource
import secrets
import sys
import threading

from ... import intervals  # imported before any candidate: the interval on its speedup (after timing)
from ..shared import runtime as rt
from ..shared.audit import (
    LaunchCounter,
    audited_call,
    changed,
    construction,
    install_launch_counter,
    launch_kinds,
    snapshot,
)
from ..shared.protocol import CandidateJob, fit

_isinstance = isinstance


class CandidateRunner:
    def __init__(self, job: CandidateJob, ch, out_dir: str):
        self.j, self.ch = job, ch
        self.torch = rt.C.torch
        self.dev = self.torch.device(job.device)
        self.writer = rt.OutputWriter(out_dir, reuse=True)
        self.flags: list[str] = []
        self.notes: list[str] = []
        self.out: dict = {"flags": self.flags, "notes": self.notes}
        self.cand_file: str | None = None  # set by load()
        self.seeds: dict[int, int] = {}  # trial seeds, as the harness gave them
        self.call_seeds: dict[int, int] = {}  # each trial's call seed (its random stream), likewise
        self.ref_init_work = self.init_excess = self.other_excess = 0.0  # construction work (``built``)

    def ask(self, event: dict, cmd: str) -> dict:
        """One question to the harness (a seed, a size), answered by ``cmd``."""
        self.ch.send(event)
        reply = self.ch.recv()
        if reply.get("cmd") != cmd:
            raise SystemExit(0)
        return reply

    def seed(self, i: int) -> int:
        """Trial ``i``'s seed, asked of the harness the first time it is needed."""
        if i not in self.seeds:
            got = self.ask({"event": "seed", "i": i}, "seed")
            self.seeds[i], self.call_seeds[i] = int(got["seed"]), int(got.get("call_seed") or 0)
        return self.seeds[i]

    def call_seed(self, i: int) -> int:
        """Trial ``i``'s call seed: the secret seed its call's random stream starts from, drawn
        by the harness apart from its inputs' seed (the reference process's call used it too)."""
        self.seed(i)
        return self.call_seeds[i]

    def flag(self, name: str, why: str) -> None:
        if name not in self.flags:
            self.flags.append(name)
            self.notes.append(f"{name}: {why}")

    def sync(self) -> None:
        if self.dev.type == "cuda":
            rt.C.sync(self.dev)

    def emit(self, key: str, output) -> None:
        """Write one output, announce it, and wait until the harness has read it."""
        self.sync()
        metas = self.writer.write(output)
        self.ch.send({"event": "output", "key": key, "leaves": metas})
        reply = self.ch.recv()
        if reply.get("cmd") != "ack":
            raise SystemExit(0)

    # ------------------------------------------------------------------ phases
    def prepare(self) -> None:
        """The problem's own Model (timing partner) and the trial inputs, before the candidate."""
        j = self.j
        self.ref_mod = rt.exec_source(j.task_source, "dvk_problem")
        self.init = rt.init_args(self.ref_mod, j.init_seed, self.dev)
        known = j.ref_init_work  # the reference process measured the Model's construction once per task
        if _isinstance(known, (int, float)) and not _isinstance(known, bool) and j.audit:
            self.ref_model = rt.build(self.ref_mod, "Model", self.init, j.init_seed, self.dev)
            self.ref_init_work = float(known)
        else:
            self.ref_model, self.ref_init_work = self.built(self.ref_mod, "Model", self.init)
        self.threads_before = {t.ident for t in threading.enumerate()}
        self.children_before = _children()
        self.ref_forward = type(self.ref_model).forward
        if self.dev.type == "cuda":  # libraries it calls load now (cuDNN, cuBLAS), not in the timed warm-up
            with rt.C.no_grad():  # on inputs of no judged seed: those are not known yet
                self.ref_model(*rt.gen_inputs(self.ref_mod, j.init_seed + 1, self.dev))
            self.sync()
        self.before = snapshot(self.torch, [self.ref_mod, type(self.ref_model)])

    def load(self) -> bool:
        j = self.j
        self.cand_file = os.path.join(os.getcwd(), "candidate.py")
        LaunchCounter.count, LaunchCounter.names = 0, {}
        try:
            if self.dev.type != "cuda":
                rt.no_native_builds()
            self.cand_mod = rt.exec_source(j.candidate_source, "dvk_candidate", self.cand_file)
        except BaseException as e:  # noqa: BLE001 - candidate code: every failure is data
            kind = "syntax_error" if _isinstance(e, SyntaxError) else (
                "import_error" if _isinstance(e, ImportError) else "compile_error")
            self.out.update(stage="compile", error_kind=kind, error_msg=rt.trim_traceback(e, self.cand_file),
                            cuda_broken=rt.is_cuda_error(e))
            return False
        if not _isinstance(getattr(self.cand_mod, "ModelNew", None), type):
            self.out.update(stage="load", error_kind="no_modelnew", error_msg="ModelNew is not a class after import")
            return False
        try:
            init = rt.init_args(self.ref_mod, j.init_seed, self.dev)
            self.cand_model, work = self.built(self.cand_mod, "ModelNew", init)
            self.init_excess = max(0.0, work - self.ref_init_work)
        except BaseException as e:  # noqa: BLE001
            self.out.update(stage="load", error_kind="runtime_error",
                            error_msg="ModelNew(*get_init_inputs()) failed: " + rt.trim_traceback(e, self.cand_file),
                            cuda_broken=rt.is_cuda_error(e))
            return False
        self.out["compiled"] = True
        return True

    def built(self, mod, cls_name: str, init) -> tuple:
        """(``cls_name(*init)`` built as ``runtime.build`` does, the torch work its construction
        did, weighed as a candidate's call is). The candidate's construction work beyond the
        reference's (weight-only products precomputed once) is charged to each of its audited
        calls: the reference pays it on every call, so moving it into ``__init__`` is torch
        work like any other, never work a custom kernel did."""
        model, work = construction(self.torch, lambda: rt.build(mod, cls_name, init, self.j.init_seed, self.dev),
                                   self.dev.type)
        return model, float(work) if _isinstance(work, (int, float)) else 0.0

    def call(self, model, args, audit: bool, seed: int):
        """One forward from the random stream of ``seed`` (runtime.seed_call), its Triton
        launches counted and, unless auditing is off, the whole call under the profiler:
        on the CPU torch's op profiler on every thread, on a GPU kineto with CPU and CUDA
        activities (torch work, host reads and the raw kernel table of what the GPU ran).
        Every call at the task's size is watched alike (``audit`` picks only among other
        sizes: the perturbed one is, the odd ones are not), so behaving differently when
        unwatched gains nothing here; the timed calls are recorded too (``time``)."""
        before = LaunchCounter.count
        on_cpu = self.dev.type == "cpu"
        reaped = _reaped_children() if on_cpu else None
        rt.seed_call(seed)
        task = model is self.cand_model  # the task's size (else the perturbed or odd size)
        if self.j.audit and (audit or task):  # odd sizes are information only: not watched
            LaunchCounter.log = []
            try:
                out, a = audited_call(self.torch, model, args, all_threads=on_cpu, gpu=not on_cpu, strict=True)
            finally:
                log, LaunchCounter.log = LaunchCounter.log, None
            a["kernels"] = launch_kinds(log)
            table = a.pop("table", None)
            a.pop("ops", None)  # which ops ran: the judge reads their work, not their names
            if table is not None:
                self.tables.append({**table, "task": task})
            if _isinstance(a.get("work"), (int, float)):  # construction work beyond the reference's
                a["work"] = a["work"] + (self.init_excess if task else self.other_excess)
                if _isinstance(a.get("plain"), (int, float)):
                    a["plain"] = a["plain"] + (self.init_excess if task else self.other_excess)
            elems = [x.numel() for x in args if _isinstance(x, rt.C.Tensor)]
            in_bytes = sum(x.numel() * x.element_size() for x in args if _isinstance(x, rt.C.Tensor))
            self.audits.append({**a, "launches": LaunchCounter.count - before, "task": task,
                                "in_elems": sum(elems), "in_bytes": in_bytes})
        else:
            with rt.C.no_grad():
                out = model(*args)
            self.audits.append({"launches": LaunchCounter.count - before})
        self.sync()
        # the call's evidence goes to the harness now: later candidate code cannot reach it
        self.ch.send(fit({"event": "audit", "audit": self.audits[-1]}))
        if on_cpu and _reaped_children() != reaped:  # on a GPU, Triton's first launches run ptxas
            self.flag("subprocess", "a child process ran and was waited for during a forward call")
        for leaf in rt.tensor_leaves(out):
            if type(leaf) is not rt.C.Tensor and type(leaf) is not rt.C.torch.nn.Parameter:
                self.flag("tensor_subclass", "an output is a subclass of torch.Tensor, not a plain torch.Tensor")
        return out

    def inputs(self, i: int):
        """Trial ``i``'s input set, made from its seed when needed (never all kept at once)."""
        return rt.gen_inputs(self.ref_mod, self.seed(i), self.dev)

    def trial(self, i: int, keep: bool = False):
        """One correctness trial on fresh clones of trial ``i``'s inputs (NaN-poisoned
        allocator first); its output goes to the harness. Returns the clones if ``keep``."""
        inputs = self.inputs(i)
        args = rt.clone_args(inputs)
        rt.poison(self.j.out_meta, float("nan"), self.dev)
        out = self.call(self.cand_model, args, audit=i % 2 == 0, seed=self.call_seed(i))
        if rt.mutated(args, inputs):
            self.out["cand_mutates"] = True
        if rt.aliases(out, args):
            self.out["cand_aliases"] = True
        del inputs
        self.emit(f"cand{i}", out)
        return args if keep else None

    def check(self) -> None:
        """Trials one at a time (at most an input set, its clone and the output live), then
        the same buffers refilled with trial 1's values (result caching), then trial 0's
        inputs under another poison (uninitialized memory), then the perturbed size."""
        j = self.j
        self.out["stage"] = "correctness"
        self.audits: list[dict] = []
        self.tables: list[dict] = []  # the GPU's raw kernel table of each audited call
        n = j.trials
        for i in range(1, n):
            self.trial(i)
        a0 = self.trial(0, keep=n >= 2)
        if a0 is not None:  # same buffers, new contents: a result cached on pointers or shapes shows
            p1 = self.inputs(1)
            if all(not _isinstance(x, rt.C.Tensor) or (x.shape == y.shape and x.dtype == y.dtype)
                   for x, y in zip(a0, p1)):
                for x, y in zip(a0, p1):
                    if _isinstance(x, rt.C.Tensor):
                        rt.C.copy_(x, y)
                del p1
                self.emit("recheck1", self.call(self.cand_model, a0, audit=False, seed=self.call_seed(1)))
            del a0
        args = rt.clone_args(self.inputs(0))  # same inputs, other poison: uninitialized memory differs
        rt.poison(j.out_meta, 12345.0, self.dev)
        self.emit("determinism0", self.call(self.cand_model, args, audit=True, seed=self.call_seed(0)))
        del args
        self.perturbed()  # the audits went to the harness call by call (``call``)
        if self.tables:
            from ..shared.profile import merge_tables

            self.out["checked_kernels"] = merge_tables(self.tables)
        self.out["launch_names"] = dict(LaunchCounter.names)
        if self.dev.type == "cuda":
            rt.C.empty_cache()

    def perturbed(self) -> None:
        """The candidate at the size the harness names now (judged) and at odd sizes
        (information for the feedback)."""
        j = self.j
        if not j.other_sizes:
            return
        self.ch.send({"event": "phase", "phase": "perturbation"})
        for key, err in (("pcand", "perturb_error"), ("ocand", "odd_error")):
            got = self.ask({"event": "sizes", "key": key}, "sizes")
            overrides, seed, call_seed = got.get("overrides"), got.get("seed"), got.get("call_seed")
            known = got.get("ref_init_work")  # the reference's construction work at this size, if measured
            if not overrides or not isinstance(seed, int):
                continue
            from ...tasks.shapes import apply_overrides

            model = inputs = None  # one perturbed model at a time: the last one is gone before the next
            try:
                pmod = rt.exec_source(apply_overrides(j.task_source, overrides), f"dvk_problem_{key}")
                init = rt.init_args(pmod, j.init_seed, self.dev)
                inputs = rt.gen_inputs(pmod, seed, self.dev)
                self.other_excess = 0.0
                if key == "pcand" and j.audit:
                    if _isinstance(known, (int, float)) and not _isinstance(known, bool):
                        ref_work = float(known)
                    else:
                        _, ref_work = self.built(pmod, "Model", init)
                    model, work = self.built(self.cand_mod, "ModelNew", init)
                    self.other_excess = max(0.0, work - ref_work)
                else:
                    model = rt.build(self.cand_mod, "ModelNew", init, j.init_seed, self.dev)
                out = self.call(model, rt.clone_args(inputs), audit=key == "pcand",
                                seed=call_seed if isinstance(call_seed, int) else 0)
            except BaseException as e:  # noqa: BLE001
                if rt.is_cuda_error(e):
                    raise
                self.out[err] = f"{type(e).__name__}: {str(e)[:300]}"
                del model, inputs
                continue
            del model, inputs
            self.emit(key, out)
            del out

    def time(self) -> None:
        """Timing inputs made beside other checks; then, with the GPU to itself, the
        interleaved timed pairs, recorded by kineto (the candidate's kernels in them are
        its kernel evidence); then the last round's outputs."""
        from ..shared import profile, timing

        j = self.j
        self.out["stage"] = "timing"
        marks = [rt.C.perf()]
        plan = self.plan()
        sets = [self.inputs(i) for i in range(plan.sets)]
        self.ch.send({"event": "timing_ready"})  # the harness gives this process the GPU alone
        go = self.ch.recv()
        if go.get("cmd") != "go":
            raise SystemExit(0)
        checks = [(float(u), int(s)) for u, s in go.get("checks") or []]
        check_seeds = [int(c) for c in go.get("call_seeds") or []]
        marks.append(rt.C.perf())
        # kernel evidence: every warm-up and timed call of both sides runs under kineto, each
        # side's calls inside its own record_function range (profile.py attributes kernels)
        ref_fn, cand_fn = profile.marked(profile.REF, self.ref_model), profile.marked(profile.CAND, self.cand_model)
        with profile.recording(self.torch) as prof:  # as the compared calls: one profiler, one look
            res = timing.interleaved(rt.C, self.dev, ref_fn, cand_fn, sets, warmup=j.timing.warmup_iters,
                                     **j.timing.kw(), placements=plan.placements, reclone=rt.clone_args,
                                     poison=rt.poison_outputs, lead_from_ref=j.timing.timing_lead_from == "reference",
                                     before_compared=lambda k, j=None: rt.seed_call(
                                         self.call_seed(k) if j is None else
                                         (check_seeds[j] if j < len(check_seeds) else secrets.randbits(62))),
                                     before_other=lambda: rt.seed_call(secrets.randbits(62)),
                                     on_timed=lambda: self.ch.send({"event": "timed_start"}), checks=checks,
                                     ci_target=j.timing.timing_ci_target, ci_budget_s=j.timing.timing_ci_budget_s)
            self.ch.send({"event": "timed_end"})
        marks.append(rt.C.perf())
        ci = intervals.speedup_ci(res.pop("pair_blocks"))  # outside the timed window and the harness's wall time
        res["speedup_ci"] = list(ci) if ci is not None else None
        last = res.pop("last_outputs")
        kept = res.pop("checked_outputs")
        res["plan"] = {**plan.as_dict(), "measured_peak_bytes": rt.C.torch.cuda.max_memory_allocated(self.dev)}
        self.out["timing"] = res
        self.out["kernels"] = profile.timed_table(prof, cand_fn.calls)
        marks.append(rt.C.perf())
        self.ch.send({"event": "profiled"})  # done with the GPU alone
        del sets
        for i, o in last.items():
            self.emit(f"timed{i}", o)
        for (i, k), o in kept.items():  # check i on set k: the reference's output index i x trials + k
            self.emit(f"check{i * j.trials + k}", o)
        marks.append(rt.C.perf())
        res["phase_ms"] = {k: round(1e3 * (b - a), 1) for k, a, b in
                           zip(("prepare", "timed", "profile", "outputs"), marks, marks[1:])}

    def integrity(self, phase: str) -> None:
        """Patches visible after a phase (evidence: it can only flag the candidate)."""
        hits = changed(self.before, snapshot(self.torch, [self.ref_mod, type(self.ref_model)]))
        if type(self.ref_model).forward is not self.ref_forward:
            hits.append("Model.forward")
        if hits:
            self.flag("monkey_patch", f"replaced during {phase}: {', '.join(hits[:8])}")

    def plan(self):
        """How many input sets and placements the timing phase holds (memplan.py), from one
        set's size, the reference's output size, the bytes the harness admitted and the
        device's free memory now."""
        from ..shared import memplan

        in_bytes = self.j.input_bytes
        if not in_bytes:  # the reference process could not size it on the meta device
            probe = self.inputs(0)
            in_bytes = memplan.tensor_bytes(self.torch, probe)
            del probe
        rt.C.empty_cache()
        free = self.torch.cuda.mem_get_info(self.dev)[0]
        budget = max(0, free - (1 << 30))  # a margin for the models' own work space
        if self.j.memory_bytes:  # what the harness admitted this evaluation with (admission.py)
            budget = min(budget, self.j.memory_bytes)
        flush = self.j.timing.l2_flush_mb << 20
        kept = self.j.timed_checks * self.j.output_bytes  # the timed checks' outputs live until handed over
        return memplan.plan_timing(in_bytes, self.j.output_bytes, budget, flush + kept, self.j.trials,
                                   self.j.timing.timing_placements)

    def leftovers(self) -> None:
        """Threads and child processes still alive that were not there before the candidate loaded."""
        alive = [f"{t.name} ({type(t).__name__})" for t in threading.enumerate()
                 if t.is_alive() and t.ident not in self.threads_before]
        if alive:
            self.flag("threads", f"{len(alive)} thread(s) started by the candidate still alive: {', '.join(alive[:4])}")
        if _children() - self.children_before:
            self.flag("subprocess", "the candidate started child processes")


def _reaped_children() -> tuple:
    """The resource use of this process's children that have ended and been waited for:
    it changes whenever one more has."""
    return tuple(resource.getrusage(resource.RUSAGE_CHILDREN))


def _children() -> set:
    try:
        pid = os.getpid()
        out = set()
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.update(fh.read().split())
        return out
    except OSError:
        return set()


def run(job: CandidateJob, ch, out_dir: str) -> None:
    r = CandidateRunner(job, ch, out_dir)
    try:
        r.prepare()
    except BaseException as e:  # noqa: BLE001 - the problem failed here: not the candidate's fault
        ch.send(fit({"event": "checked", "result": {"stage": "reference", "error_kind": "reference_error",
                                                    "error_msg": rt.trim_traceback(e, None), "flags": [],
                                                    "notes": []}}))
        return
    ok = r.load()
    ch.send({"event": "loaded", "ok": ok})
    if ok:
        _phase(r, "correctness", r.check)
    ch.send(fit({"event": "checked", "result": r.out}))
    if not ok or r.out.get("cuda_broken") or r.out.get("error_kind"):
        return
    cmd = ch.recv()
    if cmd.get("cmd") != "time":
        return
    _phase(r, "timing", r.time)
    ch.send(fit({"event": "timed", "result": r.out}))


def _phase(r: CandidateRunner, stage: str, fn) -> None:
    """Run one phase of candidate code: a failure is data; leftovers and patches are checked after."""
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - candidate code: every failure is data
        cb = rt.is_cuda_error(e)
        r.out.update(stage=stage, error_kind="cuda_error" if cb else "runtime_error",
                     error_msg=rt.trim_traceback(e, r.cand_file), cuda_broken=cb)
    r.leftovers()
    r.integrity(stage)


def warm_gpu_tools(device: str) -> None:
    """Load what the timing phase uses for the first time in a process (the GPU profiler,
    the busy-wait and random kernels) while the worker waits for its candidate, so a timed
    phase, which has the GPU to itself, does not spend seconds loading it."""
    from ..shared import profile, timing

    C, dev = rt.C, rt.C.torch.device(device)
    x = C.torch.ones(1024, device=dev)
    profile.profile_kernels(C, dev, lambda t: t * 2, [x], calls=1)
    timing.sm_clock_mhz(C, dev, cycles=1000)
    timing.vary(C, [x])
    C.sync(dev)


def main(argv: list[str]) -> None:
    ch, device, notes = rt.start(argv)
    install_launch_counter()
    if not device.startswith("cuda"):  # interpreted Triton: every access inside the launch's tensors
        from .interp_bounds import install

        install(rt.C.torch)
    from ..shared.audit import settle

    settle(rt.C.torch, device, all_threads=not device.startswith("cuda"))
    if device.startswith("cuda"):
        warm_gpu_tools(device)
    out_dir = os.path.join(os.getcwd(), "out")
    ch.send({"event": "ready", "pid": os.getpid(), "uid": os.getuid(), "gpu": rt.gpu_name(device),
             "torch": rt.C.torch.__version__, "notes": notes})
    msg = ch.recv()
    if msg.get("cmd") != "job":
        return
    run(CandidateJob.from_dict(msg["job"]), ch, out_dir)
    try:
        ch.recv(timeout=30)  # the harness kills this process; wait for it
    except Exception:  # noqa: BLE001
        pass
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
