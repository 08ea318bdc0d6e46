"""The reference process: the problem's own ``Model``, run where no candidate ever was.

Covers: one long-lived process per device that never imports candidate code. On request
it computes the reference outputs of every correctness trial (fresh inputs from each
seed, the same init seed the candidate gets, one trial at a time; a large output kept as
its values at the entry's secret sample indices; a task that cannot fit even one trial
refused up front from a meta-device pass; one call's sizes alone, on request), whether the reference mutates or aliases
its inputs, its work (FLOPs + elements, for the coverage estimate), the outputs of the
harness's timed checks (the first trial's inputs varied from each check's seed), the
float64 oracle and the precision calibration of floating outputs (``calibrate_precision``),
its outputs at the first valid size among those the harness drew, and the clean timings the
harness checks candidates' claims against: eager and torch.compile baselines, and the time
of one flush-and-lead before a timed call. Outputs go as raw-byte files into a folder only
the harness can reach. Does not cover: candidates (``candidate/worker.py``), comparison
(``harness/judge.py``).

Run as ``python -m davinci_kernel.evaluate.reference.process FD CONF``.
"""

from __future__ import annotations

import gc
import sys
from typing import Optional

from ..shared import memplan
from ..shared import runtime as rt
from ..shared.protocol import ReferenceJob


def compute_reference(job: ReferenceJob) -> dict:
    C = rt.C
    dev = C.torch.device(job.device)
    from ..shared.audit import audited_call
    from ..shared.opwork import moves_only

    mod = rt.exec_source(job.task_source, "dvk_reference")
    out: dict = {"leaves": {}, "ref_mutates": False, "ref_aliases": False}
    sizes = meta_sizes(mod, job.init_seed)
    if sizes is not None:
        out.update(sizes._asdict())
        room = device_memory(dev)
        need = memplan.least_need(sizes.input_bytes, sizes.output_bytes, sizes.param_bytes)
        if room is not None and need > room:
            k, gib = memplan.MODEL_COPIES, memplan.GiB
            raise TooLarge(f"a worker's models and one correctness trial need {need / gib:.1f} GiB (parameters "
                           f"and buffers {k} x {sizes.param_bytes / gib:.1f} GiB, inputs {sizes.input_bytes / gib:.1f} "
                           f"GiB and their clone, outputs {sizes.output_bytes / gib:.1f} GiB), more than the "
                           f"{room / gib:.1f} GiB this {dev.type.upper()} has")
    init = rt.init_args(mod, job.init_seed, dev)
    model, out["ref_init_work"] = _built(mod, init, job.init_seed, dev)
    if sizes is None:
        out["param_bytes"] = memplan.model_bytes(C.torch, model)
    writer = rt.OutputWriter(job.out_dir)
    for i, seed in enumerate(job.seeds):
        inputs = rt.gen_inputs(mod, seed, dev)
        args = rt.clone_args(inputs)
        rt.seed_call(call_seed(job, i))
        if i == 0:
            y, audit = audited_call(C.torch, model, args)
            out["ref_work"] = audit["work"]
            out["ref_plain"] = audit["plain"]  # one pass per element op: profile.work_share's other measure
            out["ref_flops"] = audit.get("flops_by_dtype") or {}  # by dtype: the speed-of-light floor's compute
            out["ref_moves"] = moves_only(audit["ops"])  # only moves data: copy kernels earn credit
            rt.seed_call(call_seed(job, i))
            with C.no_grad():  # the same call again: a reference that is not deterministic says so
                again = model(*rt.clone_args(inputs))
            out["ref_nondeterministic"] = not _same(y, again)
            del again
        else:
            with C.no_grad():
                y = model(*args)
        sync(dev)
        out["ref_mutates"] = out["ref_mutates"] or rt.mutated(args, inputs)
        out["ref_aliases"] = out["ref_aliases"] or rt.aliases(y, args)
        if sizes is None and i == 0:  # not sized on the meta device: the real first trial's sizes
            out.update(input_bytes=memplan.tensor_bytes(C.torch, list(inputs)),
                       output_bytes=memplan.tensor_bytes(C.torch, y))
        out["leaves"][f"ref{i}"] = writer.write(y, job.sample_seed)
        del y, args, inputs
    timed_checks(job, mod, model, writer, dev, out)
    del model  # one model at a time: the perturbed sizes build their own
    calls = [(f"oracle{i}", lambda s=s: rt.gen_inputs(mod, s, dev), call_seed(job, i)) for i, s in enumerate(job.seeds)]
    calls += [(f"voracle{j * len(job.seeds) + k}", lambda v=v, k=k: _varied(mod, job, dev, v, k),
               check_call_seed(job, j)) for j, v in enumerate(_checks(job, dev)) for k in range(len(job.seeds))]
    out["precision"] = calibrate_precision(mod, job, dev, writer, out, calls)
    for key, variants in (("pref", job.perturb), ("podd", job.odd)):
        got = _other_size(job, variants, key, sizes, writer, dev, out)
        if got is not None:
            out["perturb_used" if key == "pref" else "odd_used"] = got
    if out.get("perturb_used"):  # the perturbed size's own oracle and limits: errors grow with the sizes
        from ...tasks.shapes import apply_overrides

        pmod = rt.exec_source(apply_overrides(job.task_source, out["perturb_used"]), "dvk_reference_poracle")
        pcalls = [("poracle", lambda: rt.gen_inputs(pmod, job.perturb_seed, dev), job.perturb_call_seed)]
        out["pprecision"] = calibrate_precision(pmod, job, dev, writer, out, pcalls)
    return out


def call_seed(job: ReferenceJob, i: int) -> int:
    """Trial ``i``'s call seed (the harness's secret one, drawn apart from its inputs' seed)."""
    return job.call_seeds[i] if i < len(job.call_seeds) else 0


def check_call_seed(job: ReferenceJob, j: int) -> int:
    """Timed check ``j``'s call seed."""
    return job.check_call_seeds[j] if j < len(job.check_call_seeds) else 0


def _checks(job: ReferenceJob, dev) -> list[int]:
    """The timed checks' variation seeds where they are computed (a GPU: the CPU is not timed)."""
    return list(job.timed_checks) if dev.type == "cuda" and job.seeds else []


def _varied(mod, job: ReferenceJob, dev, seed: int, k: int = 0) -> list:
    """A timed check's inputs on set ``k``: trial k's varied from the check's seed (``timing.vary_seeded``)."""
    from ..shared.timing import vary_seeded

    return vary_seeded(rt.C, rt.gen_inputs(mod, job.seeds[k], dev), seed)


def timed_checks(job: ReferenceJob, mod, model, writer, dev, out: dict) -> None:
    """The outputs of the harness's timed checks (GPU only: the CPU is not timed): each
    trial's inputs varied from each check's seed (``timing.vary_seeded``), as the worker
    varies them in the timed round the check picks, whichever set that round is on (check j
    on set k is ``vref{j * trials + k}``: the round, hence the set, is known only after timing)."""
    if not _checks(job, dev):
        return
    from ..shared.timing import vary_seeded

    n = len(job.seeds)
    for k, s in enumerate(job.seeds):
        inputs = rt.gen_inputs(mod, s, dev)
        for j, seed in enumerate(_checks(job, dev)):
            args = vary_seeded(rt.C, inputs, seed)
            rt.seed_call(check_call_seed(job, j))
            with rt.C.no_grad():
                y = model(*args)
            sync(dev)
            out["leaves"][f"vref{j * n + k}"] = writer.write(y, job.sample_seed)
            del y, args
        del inputs


def calibrate_precision(mod, job: ReferenceJob, dev, writer, out: dict, calls: list) -> dict:
    """The float64 oracle of every compared call in ``calls`` ((file key, a function making
    its inputs, its call seed) each: the trials as ``oracle{i}``, the timed checks as
    ``voracle{j}``, the perturbed size as ``poracle``), written beside the reference's
    outputs (a large output at the same secret indices), and per output leaf the errors
    against it of each ``precision.VARIANTS`` run of the problem's Model on the first
    ``precision.CALIBRATION_CALLS`` calls, from which the harness sets each floating leaf's
    precision limit for its dtype (precision.py); every compared output is then held to it.
    Where an output has fewer than ``precision.MIN_ELEMENTS`` values, the variants run on
    every call and their values of such outputs go along (``precision.small_record``): the
    harness judges those call by call against the variants on the same inputs. Returns the
    calibration record. A problem the oracle cannot run (an op without float64, a model
    that draws random numbers or holds float32 tensors it does not register) is recorded
    as not calibrated: the fixed limit then applies."""
    from ..shared import precision as pr
    from ..shared.transfer import flatten

    C = rt.C
    on_gpu = dev.type == "cuda"
    if out.get("ref_nondeterministic") or not calls:
        return {"error": "the reference is not deterministic" if calls else "no trials"}

    def run(variant, todo, whole: Optional[int] = None) -> list:  # per call, the leaves as precision.judged keeps
        # them; from call ``whole`` on, only the small ones (the rest None): large ones are judged on the first calls
        model = rt.build(mod, "Model", rt.init_args(mod, job.init_seed, dev), job.init_seed, dev)
        model = pr.double_module(model) if variant.double else model
        pr.round_module_(model, variant.rounding, variant.mode)
        got = []
        for key, make, seed in todo:
            args = make()
            args = pr.double_tree(args) if variant.double else pr.round_tree(args, variant.rounding, variant.mode)
            rt.seed_call(seed)
            with C.no_grad(), pr.arithmetic(variant, on_gpu):
                y = flatten(model(*args))
            sync(dev)
            if variant.double:  # the oracle's files: a large output at the entry's secret indices
                out["leaves"][key] = writer.write(y, job.sample_seed)
            late = whole is not None and len(got) >= whole
            got.append([None if late and pr.compared_count(x, job.sample_seed) >= pr.MIN_ELEMENTS
                        else pr.judged(x, job.sample_seed) for x in y])
            del y, args
        return got

    try:
        oracle = run(pr.ORACLE, calls)
        n = [0 if x is None else x.values.numel() for x in oracle[0]]
        small = any(0 < k < pr.MIN_ELEMENTS for k in n)  # judged call by call: the variants on every call's inputs
        calib = calls[:pr.CALIBRATION_CALLS]
        outs = {v.name: run(v, calls if small else calib, len(calib)) for v in pr.VARIANTS
                if on_gpu or not v.device_tf32}
        errors = {k: pr.leaf_errors(got[:len(calib)], oracle[:len(calib)]) for k, got in outs.items()}
        rec = {"trials": len(calib), "n": n, "errors": errors, "oracles": [k for k, _, _ in calls]}
        if small:
            rec["small"] = pr.small_record([k for k, _, _ in calls], outs)
        return rec
    except Exception as e:  # noqa: BLE001 - the oracle is optional: the fixed limit applies
        for key, _, _ in calls:
            out["leaves"].pop(key, None)
        if on_gpu:
            C.empty_cache()
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}


def _other_size(job: ReferenceJob, variants: list, key: str, base: Optional[memplan.Sizes], writer, dev, out: dict):
    """The reference's outputs at the first of ``variants`` it accepts and that stays within
    the task's memory (1.25x its inputs + outputs and 1.25x its model's parameters, or 64 MiB
    each; ``base``: the task's sizes, None if unknown); the overrides used, or None."""
    C = rt.C
    from ...tasks.shapes import apply_overrides

    for k, overrides in enumerate(variants):
        try:
            pmod = rt.exec_source(apply_overrides(job.task_source, overrides), f"dvk_reference_{key}{k}")
            sizes = meta_sizes(pmod, job.init_seed)
            if base is not None and sizes is not None and not (
                    _within(sizes.input_bytes + sizes.output_bytes, base.input_bytes + base.output_bytes)
                    and _within(sizes.param_bytes, base.param_bytes)):
                out.setdefault("notes", []).append(f"{key} {overrides} skipped: larger than the task")
                continue
            pinit = rt.init_args(pmod, job.init_seed, dev)
            if key == "pref":  # its construction work there too: each candidate's is weighed against it
                pmodel, init_work = _built(pmod, pinit, job.init_seed, dev)
            else:
                pmodel, init_work = rt.build(pmod, "Model", pinit, job.init_seed, dev), None
            pin = rt.gen_inputs(pmod, job.perturb_seed, dev)
            rt.seed_call(job.perturb_call_seed)
            if key == "pref":  # the reference's work at the perturbed size: the candidate's is weighed there too
                from ..shared.audit import audited_call

                y, audit = audited_call(C.torch, pmodel, rt.clone_args(pin))
                out["perturb_work"], out["perturb_plain"] = audit["work"], audit["plain"]
            else:
                with C.no_grad():
                    y = pmodel(*rt.clone_args(pin))
            sync(dev)
            del pmodel, pin
        except BaseException as e:  # noqa: BLE001 - the reference rejects this size: try the next
            out.setdefault("notes", []).append(f"{key} {overrides} skipped: {type(e).__name__}")
            continue
        out["leaves"][key] = writer.write(y, job.sample_seed)
        if init_work is not None:
            out["perturb_init_work"] = init_work
        return overrides
    return None


def _built(mod, init, init_seed: int, dev) -> tuple:
    """(the problem's Model, the torch work its construction did or None), measured as a
    candidate worker measures a construction (``audit.construction``): the work a
    candidate's own construction is weighed against, once per task and size here rather
    than in every worker."""
    from ..shared.audit import construction

    model, work = construction(rt.C.torch, lambda: rt.build(mod, "Model", init, init_seed, dev), dev.type)
    return model, (float(work) if isinstance(work, (int, float)) and not isinstance(work, bool) else None)


def _within(other: int, task: int) -> bool:
    """A perturbed size's bytes stay within the task's: 1.25x, or 64 MiB."""
    return other <= max(1.25 * task, 64 << 20)


class TooLarge(Exception):
    """The task does not fit this device even one trial at a time."""


def meta_sizes(mod, init_seed: int):
    """(input bytes, output bytes, the model's parameter and buffer bytes) of one call, from a
    pass that allocates nothing: on the meta device, else under fake tensors (a
    ``get_inputs`` that moves its tensors with ``.cuda()``, as KernelBench's examples do);
    None where neither runs the problem."""
    torch = rt.C.torch
    for mode in (lambda: torch.device("meta"), _fake_mode):
        try:
            with mode():
                inputs = mod.get_inputs()
                model = mod.Model(*mod.get_init_inputs())
                with torch.no_grad():
                    y = model(*inputs)
            return memplan.Sizes(memplan.tensor_bytes(torch, list(inputs)), memplan.tensor_bytes(torch, y),
                                 memplan.model_bytes(torch, model))
        except Exception:  # noqa: BLE001 - ops without a meta kernel, data-dependent shapes
            continue
    return None


def _fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def sizes_of(job: ReferenceJob) -> dict:
    """One call's input and output bytes and the model's parameter bytes from the meta device
    ({} where that does not run): what the harness admits an evaluation of this task by
    (``admission.py``)."""
    sizes = meta_sizes(rt.exec_source(job.task_source, "dvk_reference"), job.init_seed)
    return {} if sizes is None else sizes._asdict()


def free_memory(device: str):
    """Bytes free on the device now (the host's available memory on CPU), or None."""
    if device.startswith("cuda"):
        return rt.C.torch.cuda.mem_get_info(rt.C.torch.device(device))[0]
    return device_memory(rt.C.torch.device("cpu"))


def device_memory(dev):
    """Bytes this device can hold: the GPU's total memory, or the host's available memory."""
    if dev.type == "cuda":
        return rt.C.torch.cuda.mem_get_info(dev)[1]
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def baseline(job: ReferenceJob, ready) -> dict:
    """Clean timings of the reference alone (eager, torch.compile) and of one flush + lead.
    Model, inputs and the torch.compile build come first, beside other work on the GPU;
    ``ready()`` returns once the harness has given this process the GPU alone."""
    C = rt.C
    from ..shared import timing

    dev = C.torch.device(job.device)
    mod = rt.exec_source(job.task_source, "dvk_reference")
    init = rt.init_args(mod, job.init_seed, dev)
    model = rt.build(mod, "Model", init, job.init_seed, dev)
    sets = [rt.gen_inputs(mod, s, dev) for s in job.seeds]
    kw = job.timing.kw()
    res: dict = {}
    compiled = None
    if job.timing.baseline_compile:
        try:
            compiled = C.torch.compile(model)
            with C.no_grad():
                compiled(*sets[0])  # builds it now, not in the timed warm-up
            sync(dev)
        except Exception as e:  # noqa: BLE001 - the compile baseline is optional
            compiled = None
            res["compile_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    # how many streams the reference's own GPU work uses (cuDNN may use several): a candidate
    # is held to the one stream only beyond that (guards.stream_flag)
    from ..shared.profile import profile_kernels

    prof = profile_kernels(C, dev, model, sets[0])
    res["ref_streams"] = prof["streams"]
    res["ref_gpu_ms"] = prof["total_ms_per_call"]  # its kernels' GPU time: the floor of a host-bound reference
    ready()
    res["eager_ms"] = timing.solo(C, dev, model, sets, warmup=job.timing.warmup_iters, **kw)
    res["flush_ms"] = timing.flush_cost(C, dev, job.timing.l2_flush_mb, kw["hold"])
    res["vary_ms"] = timing.vary_cost(C, dev, sets[0])
    res["call_overhead_ms"] = call_overhead(model, sets, job)
    if compiled is not None:
        try:
            res["compile_ms"] = timing.solo(C, dev, compiled, sets, warmup=max(3, job.timing.warmup_iters), **kw)
        except Exception as e:  # noqa: BLE001
            res["compile_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return res


def call_overhead(model, sets, job: ReferenceJob) -> float:
    """Wall milliseconds per timed call beyond its event time, the lead and the fresh-value
    copies: the reference timed against itself by the candidates' procedure, its wall time
    taken around the timed pairs as the harness takes a candidate's. What a worker's timed
    phase may spend outside its reported event times (flush, synchronize, bookkeeping)."""
    C = rt.C
    from ..shared import timing

    dev = C.torch.device(job.device)
    marks: list[float] = []
    # the GPU is warm from the eager timing just before: a short run, no warm-up time
    kw = {**job.timing.kw(), "budget_s": min(0.05, job.timing.timing_budget_s), "iters": 20, "warmup_ms": 0.0}
    res = timing.interleaved(C, dev, model, model, sets, warmup=2, **kw, placements=1,
                             on_timed=lambda: marks.append(C.perf()))
    wall_ms = (C.perf() - marks[0]) * 1e3
    calls = 2 * res["iters"]
    varied = max(0, res["iters"] - res["sets"])
    vary_ms = timing.vary_cost(C, dev, sets[0], n=3)
    rest = wall_ms - res["ref_sum_ms"] - res["cand_sum_ms"] - varied * vary_ms
    return max(0.0, rest / calls - res["lead_us"] / 1e3)


def _same(a, b) -> bool:
    """Bit-for-bit the same outputs (NaN where NaN)."""
    from ..shared.transfer import flatten

    xs, ys = flatten(a), flatten(b)
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys):
        if isinstance(x, rt.C.Tensor) and isinstance(y, rt.C.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not rt.C.torch.equal(x.nan_to_num(0), y.nan_to_num(0)):
                return False
        elif x != y:
            return False
    return True


def peaks(device: str, ready) -> dict:
    """The device's copy bandwidth and matmul peaks (``roofline.measure_peaks``), measured with
    the GPU to this process alone (``ready`` waits for the harness's go), and their provenance."""
    from ..shared import roofline

    if not device.startswith("cuda"):
        return {"error": "peaks are measured on a GPU only"}
    dev = rt.C.torch.device(device)
    ready()
    return {**roofline.measure_peaks(rt.C.torch, dev), "provenance": roofline.provenance(rt.C.torch, dev)}


def _ready(ch) -> None:
    """Say the baseline is ready to be timed; wait for the harness's go."""
    ch.send({"event": "prepared"})
    if ch.recv().get("cmd") != "go":
        raise RuntimeError("the harness did not give the go to time the baseline")


def sync(dev) -> None:
    if dev.type == "cuda":
        rt.C.sync(dev)


def main(argv: list[str]) -> None:
    ch, device, notes = rt.start(argv)
    from ..shared.audit import settle

    settle(rt.C.torch, device)
    ch.send({"event": "ready", "pid": __import__("os").getpid(), "gpu": rt.gpu_name(device),
             "torch": rt.C.torch.__version__, "free_bytes": free_memory(device), "notes": notes})
    while True:
        try:
            msg = ch.recv()
        except Exception:  # noqa: BLE001 - the harness went away
            return
        cmd = msg.get("cmd")
        if cmd == "stop":
            return
        job = ReferenceJob.from_dict(msg["job"])
        try:
            if cmd == "sizes":
                result = sizes_of(job)
            elif cmd == "peaks":
                result = peaks(device, lambda: _ready(ch))
            else:
                result = compute_reference(job) if cmd == "reference" else baseline(job, lambda: _ready(ch))
        except TooLarge as e:
            result = {"error": f"too large: {e}", "error_kind": "too_large"}
        except BaseException as e:  # noqa: BLE001 - a broken problem is the task's fault, reported as such
            oom = isinstance(e, (MemoryError, getattr(rt.C.torch, "OutOfMemoryError", MemoryError)))
            result = {"error": rt.trim_traceback(e, None), "cuda_broken": rt.is_cuda_error(e),
                      "error_kind": "too_large" if oom else "reference_error"}
        ch.send({"event": cmd, "result": result})
        if result.get("cuda_broken"):
            return
        for name in [n for n in sys.modules if n.startswith("dvk_reference")]:
            sys.modules.pop(name, None)
        gc.collect()
        if device.startswith("cuda"):
            rt.C.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:])
