"""The harness's requests to the reference processes: reference entries and clean baselines.

Covers: asking a reference process of a device for one thing under the device's gate
(references beside other checks; a baseline builds beside them and is timed with the GPU
alone), one call's sizes (what an evaluation is admitted by), the reference entry of a task at given seeds and sizes (computed once, cached in a
folder no worker can open, with a secret sample seed for large outputs), and the clean
baselines (cached across runs per task, GPU, torch and timing method; a cached entry is
re-timed once per evaluator and dropped if it disagrees by more than 25 %). Does not cover:
what a reference process computes (``reference.py``) or candidates (``evaluator.py``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import secrets
import shutil
import threading
from typing import Optional

from ...config import EvalConfig
from ...records import Task
from ..shared import memplan
from ..shared.protocol import ReferenceJob, TimingSettings, WorkerDied, WorkerTimeout
from .baselines import BaselineCache
from .draws import Draw
from .gate import Gates
from .refcache import ReferenceCache


class TrustedSide:
    """Reference entries and baselines for one evaluator, from its pool's reference processes."""

    def __init__(self, cfg: EvalConfig, pool, gates: Gates, timing_settings: TimingSettings,
                 refs: ReferenceCache, baselines: BaselineCache):
        self.cfg, self.pool, self.gates, self.timing_settings = cfg, pool, gates, timing_settings
        self.refs, self.baselines = refs, baselines
        self._baseline_checked: set = set()
        self._key_locks: dict = {}
        self._infos: dict[str, tuple[str, str]] = {}
        self._sizes: dict[tuple, Optional[tuple[int, int]]] = {}
        self._peaks: dict[str, Optional[dict]] = {}  # device -> measured peaks (or None), once per evaluator
        self._locks_lock = threading.Lock()

    def key_lock(self, key) -> threading.Lock:
        with self._locks_lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def ask(self, device: str, cmd: str, job: ReferenceJob) -> dict:
        """One request to a reference process of the device; {"error": ...} if it failed.
        It works beside other checks; a baseline says when it is ready to be timed, and is
        then timed with the GPU to itself."""
        gate = self.gates(device)
        limit = self.cfg.compile_timeout_s + self.cfg.run_timeout_s
        try:
            with self.pool.reference(device) as ref:
                with gate.shared(ref):
                    ref.send({"cmd": cmd, "job": job.to_dict()})
                    msg = ref.recv(limit)
                if msg.get("event") == "prepared":
                    with gate.exclusive():
                        ref.send({"cmd": "go"})
                        msg = ref.recv(limit)
                result = msg.get("result", {})
                if result.get("cuda_broken"):
                    raise WorkerDied(result.get("error", "CUDA error"))  # replaced on the way out
                return result
        except (WorkerTimeout, WorkerDied) as e:
            return {"error": f"the reference process failed: {e}"}

    def sizes(self, variant: str, device: str) -> Optional[memplan.Sizes]:
        """One call's (input bytes, output bytes) and the model's parameter and buffer bytes
        of this problem text on this kind of device: from the meta device, asked once, or
        learnt from a reference entry; None while unknown."""
        key = _sizes_key(variant, device)
        with self.key_lock(("sizes", key)):
            if key not in self._sizes:
                job = ReferenceJob(task_source=variant, seeds=[], init_seed=self.cfg.seed, out_dir="", device=device,
                                   timing=self.timing_settings)
                got = self.ask(device, "sizes", job)
                self._sizes[key] = _sizes_of(got) if "input_bytes" in got else None
            return self._sizes[key]

    def learn_sizes(self, variant: str, device: str, entry: dict) -> None:
        """Sizes a reference entry measured on real tensors, for a task the meta device could not size."""
        if entry.get("input_bytes") is not None and entry.get("output_bytes") is not None:
            key = _sizes_key(variant, device)
            with self.key_lock(("sizes", key)):
                if self._sizes.get(key) is None:
                    self._sizes[key] = _sizes_of(entry)

    def reference(self, task: Task, variant: str, overrides: dict, drawn: Draw, device: str) -> dict:
        """The reference entry for the drawn inputs: cached, or computed by a reference process."""
        cfg = self.cfg
        key = (task.hash, json.dumps(overrides, sort_keys=True), device.split(":")[0], drawn.key(), cfg.seed)
        got = self.refs.get(key)
        if got is not None:
            return got
        with self.key_lock(("ref", key)):  # the same reference is computed once, others wait for it
            got = self.refs.get(key)
            if got is not None:
                return got
            home = self.refs.new_home()
            sample_seed = secrets.randbits(62)  # which elements of large outputs count: never sent to a candidate
            job = ReferenceJob(task_source=variant, seeds=list(drawn.trial_seeds), init_seed=cfg.seed, out_dir=home,
                               device=device, perturb=list(drawn.perturb), odd=list(drawn.odd),
                               perturb_seed=drawn.perturb_seed, sample_seed=sample_seed,
                               timed_checks=[s for _, s in drawn.timed_checks], call_seeds=list(drawn.call_seeds),
                               perturb_call_seed=drawn.perturb_call_seed,
                               check_call_seeds=list(drawn.check_call_seeds), timing=self.timing_settings)
            result = self.ask(device, "reference", job)
            if "error" in result:
                shutil.rmtree(home, ignore_errors=True)
                return {"error": result["error"], "error_kind": result.get("error_kind", "reference_error")}
            entry = self.refs.build(home, result, len(drawn.trial_seeds))
            entry["sample_seed"] = sample_seed
            self.refs.put(key, entry)
            return entry

    def baseline(self, task: Task, variant: str, overrides: dict, seeds: list[int], device: str) -> Optional[dict]:
        """Clean eager / torch.compile timings, the flush and per-call overheads, from a
        reference process, cached per (task, GPU, torch, timing method). A cached entry is
        re-checked once per evaluator (and again after ``remeasure``) against a fresh eager
        timing and thrown away if they disagree by more than 25 %; where they agree, the
        fresh time is ``eager_ms_now``, what the reference's time beside a candidate is held
        to (the stored ``eager_ms`` stays the one its ``compile_ms`` was measured with)."""
        cfg = self.cfg
        gpu, torch_v = self.device_info(device)
        key = BaselineCache.key(task.hash, overrides, gpu, torch_v, self.timing_settings.method_extra())
        with self.key_lock(("base", key)):
            got = self.baselines.get(key)
            if got is not None and key in self._baseline_checked:
                return got
            job = ReferenceJob(task_source=variant, seeds=seeds[:3], init_seed=cfg.seed, out_dir="", device=device,
                               timing=self.timing_settings)
            if got is not None:  # check the stored entry once per run, eager only
                job.timing = dataclasses.replace(self.timing_settings, baseline_compile=False)
            fresh = self.ask(device, "baseline", job)
            if "error" in fresh:
                return got
            self._baseline_checked.add(key)
            if got is not None and fresh.get("eager_ms"):
                if abs(math.log(fresh["eager_ms"] / got["eager_ms"])) <= math.log(1.25):
                    return {**got, **{k: fresh[k] for k in ("flush_ms", "vary_ms", "call_overhead_ms", "ref_streams",
                                                            "ref_gpu_ms") if k in fresh},
                            "eager_ms_now": fresh["eager_ms"]}
                job.timing = self.timing_settings  # the stored entry disagrees: measure all of it again
                fresh = self.ask(device, "baseline", job)
            if "eager_ms" in fresh:
                self.baselines.put(key, fresh)
            return fresh

    def remeasure(self, task: Task) -> None:
        """The next ``baseline`` of ``task`` (any sizes, any GPU) times the reference afresh
        before its stored entry is used: a timing disagreement is re-measured on both sides."""
        for k in list(self._baseline_checked):
            if BaselineCache.of_task(k, task.hash):
                self._baseline_checked.discard(k)

    def peaks(self, device: str) -> Optional[dict]:
        """The card's measured peaks (``roofline.measure_peaks``): from the peak cache when it
        was measured under this card, driver and torch, else measured once by a reference
        process with the GPU alone and cached; None where they cannot be measured."""
        from ..shared.roofline import driver_version
        from .lightspeed import PeakCache

        gpu, torch_v = self.device_info(device)
        with self.key_lock(("peaks", device)):
            if device in self._peaks:
                return self._peaks[device]
            cache = PeakCache(self.cfg.cache_dir)
            prov = {"gpu": gpu, "driver": driver_version(), "torch": torch_v}  # as this process sees them
            got = cache.get(prov)
            if got is None:
                job = ReferenceJob(task_source="", seeds=[], init_seed=self.cfg.seed, out_dir="", device=device,
                                   timing=self.timing_settings)
                got = self.ask(device, "peaks", job)
                if "error" in got or not got.get("copy_gbps"):
                    got = None
                else:  # kept under this process's view (a sandboxed /proc may hide the driver from the other)
                    got = {**got, "measured_in": got.get("provenance"), "provenance": prov}
                    cache.put(got)
            self._peaks[device] = got
            return got

    def device_info(self, device: str) -> tuple[str, str]:
        """(GPU name, torch version) as a reference process reports them; asked once per device."""
        if device not in self._infos:
            with self.pool.reference(device) as ref:
                self._infos[device] = (ref.info.get("gpu", "?"), ref.info.get("torch", "?"))
        return self._infos[device]


def _sizes_key(variant: str, device: str) -> tuple[str, str]:
    """A problem text on a kind of device ("cuda", "cpu"): what its sizes are known by."""
    return hashlib.sha256(variant.encode()).hexdigest(), device.split(":")[0]


def _sizes_of(got: dict) -> memplan.Sizes:
    """The sizes in a reference process's answer; one without parameter bytes counts none."""
    return memplan.Sizes(int(got["input_bytes"]), int(got["output_bytes"]), int(got.get("param_bytes") or 0))
