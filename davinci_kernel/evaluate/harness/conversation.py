"""The harness's side of the conversation with one candidate worker.

Covers, in the harness process: sending the job (no judged input in it), answering the
worker's questions for a trial's seed or the perturbed size only when that call starts,
reading each announced output while the worker's processes are stopped, the timed phase
(the GPU to this worker alone until the end of its timed calls; the timed checks told
at its start; the wall time measured here between the start and the end the worker announces: announcing either
late shortens it below the claimed event times, which ``judge.wall_check`` flags as it
flags time left unexplained), and one
deadline for the whole conversation beside each stage's own (a message never resets
either). The worker may only report; a report is checked against the protocol
(``protocol.py``: size and nesting capped, malformed is ``protocol_error``), and what it
claims is judged in ``judge.py``. Does not cover: the verdict, the retry rules
(``retry.py``) or starting and stopping workers (``pool.py``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Optional

import torch

from ...records import EvalResult
from ..shared.protocol import CandidateJob, ProtocolError, WorkerTimeout
from . import judge
from .draws import Draw
from .intake import read_leaves
from .isolation.procs import WorkerProcess

_OUTPUT_KEY = re.compile(r"^(cand|timed|check)([0-9]{1,2})$|^(recheck1|determinism0|pcand|ocand)$")
_WORKER_ERRORS = {"syntax_error", "import_error", "compile_error", "no_modelnew", "runtime_error", "cuda_error"}
_WORKER_STAGES = {"compile", "load", "correctness", "timing"}
_MAX_OUTPUTS = 24  # outputs of one evaluation, at most: trials, re-checks, other sizes, timed rounds and checks


class Deadline:
    """One limit for the whole conversation and one per stage, fixed when each begins."""

    def __init__(self, total_s: float):
        self.end = time.monotonic() + total_s
        self.stage_end = self.end

    def stage(self, seconds: float) -> None:
        self.stage_end = min(self.end, time.monotonic() + seconds)

    def left(self) -> float:
        left = self.stage_end - time.monotonic()
        if left <= 0:
            raise WorkerTimeout("the stage's time ran out")
        return left


class Conversation:
    """One candidate worker's evaluation, driven from the harness."""

    def __init__(self, evaluator, w: WorkerProcess, res: EvalResult, drawn: Draw, ref: dict, clock):
        self.ev, self.cfg, self.w, self.res, self.drawn, self.ref, self.clock = (
            evaluator, evaluator.cfg, w, res, drawn, ref, clock)
        self.cand: dict = {}
        self.audits: list = []  # each call's audit, received as the call ended
        self.read_bytes = 0  # what the harness has read of this worker's outputs
        self.seed = ref["sample_seed"]  # which elements of large outputs count: never sent to the worker
        cfg = self.cfg
        out_bytes = ref.get("output_bytes")
        # no output at the task's size may hold much more than the reference's (a wider dtype
        # stays within 4x of it): outputs read whole stay small. Calls at other sizes (the
        # perturbed and odd ones, one each) may be larger: twice the reference's plus 64 MiB.
        self.max_bytes = 4 * int(out_bytes) + (1 << 20) if out_bytes else None
        self.max_bytes_other = 2 * int(out_bytes) + (64 << 20) if out_bytes else None
        self.deadline = Deadline(cfg.compile_timeout_s + 2 * cfg.run_timeout_s + 30.0)

    # ------------------------------------------------------------------ checks
    def check(self, job: CandidateJob) -> dict:
        """Load, correctness and other sizes; returns the worker's report (a dict)."""
        cfg, res, w = self.cfg, self.res, self.w
        gate = self.ev._gates(w.device)
        with gate.shared(w):  # checking: other workers on this GPU may check too; a timer stops them
            self.clock.mark("gate")
            self.deadline.stage(cfg.compile_timeout_s)
            w.send({"cmd": "job", "job": job.to_dict()})
            res.stage = "compile"

            def progress(ev: str) -> bool:
                if ev == "loaded":
                    self.clock.mark("compile")
                    res.stage = "correctness"
                    self.deadline.stage(cfg.run_timeout_s)  # the trials and the other sizes together
                elif ev == "phase" and res.stage == "correctness":
                    self.clock.mark("correctness")
                    res.stage = "perturbation"
                return ev in ("loaded", "phase")

            out = self.serve("checked", progress)
            self.clock.mark(res.stage)
        if not isinstance(out, dict):
            raise ProtocolError("the check report is not an object")
        out["audits"] = self.audits  # as each call sent it when it ended, never the final report's
        return out

    def time(self) -> tuple[dict, Optional[float]]:
        """The timing phase: the worker makes its inputs beside other checks, times with the
        GPU to itself (other checking processes stopped) until it announces the end of its
        timed calls, then builds its profile's table and hands over the last round's and
        the timed checks' outputs beside other checks again (another timer stops it). Returns (its report, the wall
        milliseconds measured here around the timed pairs, or None)."""
        cfg, w = self.cfg, self.w
        gate = self.ev._gates(w.device)
        t_start = t_end = None
        self.deadline.stage(cfg.run_timeout_s)
        with gate.shared(w):  # the worker makes its timing inputs beside other checks
            w.send({"cmd": "time"})
            msg = w.recv(self.deadline.left())
            while msg.get("event") == "seed":  # the timing input sets' seeds (trials it has run)
                self._answer(msg)
                msg = w.recv(self.deadline.left())
        self.clock.mark("timing")
        if msg.get("event") == "timed":  # it failed before it was ready
            tout = msg.get("result")
        elif msg.get("event") != "timing_ready":
            raise ProtocolError(f"unexpected event {str(msg.get('event'))[:40]!r}")
        else:
            tout, profiled = None, False
            try:
                # timing: this GPU runs nothing else of ours until the timed calls end; then the
                # worker checks beside others again (a timer stops it), for its profile and outputs
                with gate.exclusive(then_share=w):
                    self.clock.mark("gate")
                    w.send({"cmd": "go", "checks": [list(c) for c in self.drawn.timed_checks],
                            "call_seeds": list(self.drawn.check_call_seeds)})
                    while True:
                        msg = w.recv(self.deadline.left())
                        ev = msg.get("event")
                        if ev == "timed_start" and t_start is None:
                            t_start = time.monotonic()
                        elif ev == "timed_end" and t_start is not None and t_end is None:
                            t_end = time.monotonic()
                            break
                        elif ev == "timed":  # it failed while timed
                            tout = msg.get("result")
                            break
                        elif ev == "profiled":
                            profiled = True
                            break
                        else:
                            raise ProtocolError(f"unexpected event {str(ev)[:40]!r}")
                    self.clock.mark("timing")
                while tout is None and not profiled:  # after the timed calls: the profile's table
                    msg = w.recv(self.deadline.left())
                    ev = msg.get("event")
                    if ev == "timed":  # it failed after its timed calls
                        tout = msg.get("result")
                    elif ev == "profiled":
                        profiled = True
                    else:
                        raise ProtocolError(f"unexpected event {str(ev)[:40]!r}")
                self.clock.mark("profile")
                if tout is None:  # the kept outputs, read beside other checks
                    tout = self.serve("timed")
                    self.clock.mark("timing_outputs")
            finally:
                gate.leave(w)
        wall_ms = (t_end - t_start) * 1e3 if t_start is not None and t_end is not None else None
        if not isinstance(tout, dict):
            raise ProtocolError("the timing report is not an object")
        return tout, wall_ms

    # ------------------------------------------------------------------ messages
    def serve(self, end: str, progress: Callable[[str], bool] = lambda ev: False):
        """The worker's messages until ``end``, whose result it returns: outputs are read as
        they are announced, questions answered, other events go to ``progress``."""
        while True:
            msg = self.w.recv(self.deadline.left())
            ev = msg.get("event")
            if ev == end:
                return msg.get("result")
            if ev == "output":
                self._intake(msg)
            elif ev == "audit":  # one call's evidence, sent as that call ended
                if len(self.audits) >= _MAX_OUTPUTS:
                    raise ProtocolError("more audited calls than an evaluation has")
                self.audits.append(msg.get("audit") if isinstance(msg.get("audit"), dict) else {})
            elif ev in ("seed", "sizes"):
                self._answer(msg)
            elif not progress(ev):
                raise ProtocolError(f"unexpected event {str(ev)[:40]!r}")

    def _answer(self, msg: dict) -> None:
        """A trial's seed, or the size the worker is to run at next (with its inputs' seed)."""
        d = self.drawn
        if msg.get("event") == "seed":
            i = msg.get("i")
            if type(i) is not int or not 0 <= i < len(d.trial_seeds):
                raise ProtocolError("a seed asked for a trial that does not exist")
            self.w.send({"cmd": "seed", "seed": d.trial_seeds[i], "call_seed": d.call_seed(i)})
            return
        key = msg.get("key")
        used = {"pcand": self.ref.get("perturb_used"), "ocand": self.ref.get("odd_used")}
        if key not in used:
            raise ProtocolError("sizes asked for an unknown call")
        self.w.send({"cmd": "sizes", "overrides": used[key], "seed": d.perturb_seed, "call_seed": d.perturb_call_seed,
                     "ref_init_work": self.ref.get("perturb_init_work") if key == "pcand" else None})

    def _expected(self, key) -> bool:
        """An output this evaluation has, not yet handed over: a trial, timed round or timed
        check that exists, or one of the named calls."""
        m = _OUTPUT_KEY.match(key) if isinstance(key, str) else None
        if m is None or key in self.cand:
            return False
        if m.group(1) is None:
            return True
        n = int(m.group(2))
        trials = len(self.drawn.trial_seeds)  # check j on set k is ``check{j * trials + k}``
        return n < (len(self.drawn.timed_checks) * trials if m.group(1) == "check" else trials)

    def _intake(self, msg: dict) -> None:
        """Read one announced output while the worker's processes are stopped, then let it go on."""
        key, w = msg.get("key"), self.w
        if not self._expected(key):
            raise ProtocolError(f"unexpected output {str(key)[:40]!r}")
        w.freeze()
        try:
            other = key in ("pcand", "ocand")  # the perturbed and odd sizes' calls
            got = read_leaves(os.path.join(w.scratch, "out"), msg.get("leaves"), w.uid, self.seed,
                              self.max_bytes_other if other else self.max_bytes)
        finally:
            w.thaw()
        self.read_bytes += sum(x.numel() * x.element_size() for x in got if isinstance(x, torch.Tensor))
        if self.max_bytes and self.read_bytes > _MAX_OUTPUTS * self.max_bytes + 2 * self.max_bytes_other:
            raise ProtocolError("more output handed over than an evaluation has")
        self.cand[key] = got
        w.send({"cmd": "ack"})


def worker_failure(res: EvalResult, out: dict) -> bool:
    """Fill ``res`` from a report that says the candidate failed (True), else leave it."""
    if not out.get("error_kind"):
        return False
    stage = out.get("stage")
    res.stage = stage if stage in _WORKER_STAGES else res.stage
    kind = out["error_kind"]
    res.error_kind = kind if kind in _WORKER_ERRORS else "runtime_error"
    res.error_msg = str(out.get("error_msg", ""))[:3000]
    if out.get("cuda_broken") is True:
        res.error_kind = "cuda_error"
    judge.add_worker_flags(res, out)
    return True
