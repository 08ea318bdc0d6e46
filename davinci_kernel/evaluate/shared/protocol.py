"""What crosses the boundary between the harness and its workers, typed, as JSON.

Covers: the framing (a 4-byte length, then UTF-8 JSON; never pickle, so a message from a
candidate process cannot run code in the harness), a channel over a socket with deadlines,
the typed records both sides share: ``TimingSettings`` (one spelling of every timing
setting, built from ``EvalConfig``), ``ReferenceJob`` (what the reference process computes)
and ``CandidateJob`` (what a candidate worker runs), and the description of one output
leaf. Does not cover: what the processes do with them (``reference.py``, ``candidate.py``)
or how the harness judges replies (``judge.py``).
"""

from __future__ import annotations

import json
import select
import socket
import struct
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Optional

MAX_MESSAGE = 64 << 20  # what a trusted process (the harness, a reference process) may send
# What a candidate worker may send in one message: its reports are a few short fields,
# output descriptions and a capped kernel table; anything larger is a protocol violation
# before a byte of it is buffered, so a worker cannot grow the harness with messages.
MAX_REPORT = 32 << 10
_MAX_DEPTH = 32  # nesting of a worker's JSON (a 100 000-deep one is a protocol error, not a crash)


class WorkerTimeout(Exception):
    pass


class WorkerDied(Exception):
    pass


class ProtocolError(WorkerDied):
    """A worker sent something that is not a well-formed message (a candidate can do that)."""


class Channel:
    """Length-prefixed JSON messages over a connected stream socket. ``limit``: the largest
    message this end accepts (``MAX_REPORT`` where the other end is a candidate worker)."""

    def __init__(self, sock: socket.socket, limit: int = MAX_REPORT):
        self.sock = sock
        self.limit = limit
        self._buf = b""

    @classmethod
    def from_fd(cls, fd: int, limit: int = MAX_MESSAGE) -> Channel:
        return cls(socket.socket(fileno=fd), limit)

    def send(self, msg: dict) -> None:
        data = json.dumps(msg, default=_plain).encode()
        try:
            self.sock.sendall(struct.pack(">I", len(data)) + data)
        except OSError as e:
            raise WorkerDied(f"channel closed: {e}") from None

    def _fill(self, n: int, deadline: Optional[float], alive=None) -> None:
        while len(self._buf) < n:
            wait = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            if wait <= 0:
                raise WorkerTimeout("no answer in time")
            r, _, _ = select.select([self.sock], [], [], wait)
            if not r:
                if alive is not None and not alive():
                    raise WorkerDied("the process exited")
                continue
            try:
                chunk = self.sock.recv(max(65536, n - len(self._buf)))
            except OSError as e:
                raise WorkerDied(f"channel closed: {e}") from None
            if not chunk:
                raise WorkerDied("channel closed")
            self._buf += chunk

    def recv(self, timeout: Optional[float] = None, alive=None) -> dict:
        deadline = None if timeout is None else time.monotonic() + timeout
        self._fill(4, deadline, alive)
        (n,) = struct.unpack(">I", self._buf[:4])
        if n > self.limit:
            raise ProtocolError(f"a message of {n} bytes exceeds the limit of {self.limit}")
        self._fill(4 + n, deadline, alive)
        data, self._buf = self._buf[4:4 + n], self._buf[4 + n:]
        if self.limit <= MAX_REPORT and _too_deep(data):
            raise ProtocolError(f"a message nested deeper than {_MAX_DEPTH} levels")
        try:
            msg = json.loads(data)
        except (ValueError, RecursionError) as e:
            raise ProtocolError(f"malformed message: {str(e)[:200]}") from None
        if not isinstance(msg, dict):
            raise ProtocolError("a message must be a JSON object")
        return msg

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _too_deep(data: bytes) -> bool:
    """True when brackets outside strings nest deeper than ``_MAX_DEPTH`` (checked before parsing)."""
    depth, in_str, esc = 0, False, False
    for b in data:
        if in_str:
            if esc:
                esc = False
            elif b == 0x5C:  # backslash
                esc = True
            elif b == 0x22:
                in_str = False
        elif b == 0x22:
            in_str = True
        elif b in (0x5B, 0x7B):
            depth += 1
            if depth > _MAX_DEPTH:
                return True
        elif b in (0x5D, 0x7D):
            depth -= 1
    return False


def fit(report: dict, limit: int = MAX_REPORT - 512) -> dict:
    """``report`` with its long strings (messages, tracebacks) cut until its JSON fits
    ``limit`` bytes; never its lists or numbers, which are evidence. One that still does not
    fit becomes a failure report: a worker's report must never exceed what the harness takes."""
    def size(x) -> int:
        return len(json.dumps(x, default=_plain).encode())

    cap = 4000
    while size(report) > limit and cap >= 50:
        report = _cut_strings(report, cap)
        cap //= 2
    if size(report) <= limit:
        return report
    result = report.get("result") if isinstance(report.get("result"), dict) else {}
    return {"event": report.get("event"), "result": {
        "stage": result.get("stage"), "error_kind": "runtime_error", "flags": [], "notes": [],
        "error_msg": "the worker's report exceeded the protocol's limit (too many outputs or kernels)"}}


def _cut_strings(x, chars: int):
    if isinstance(x, str):
        return x[:chars]
    if isinstance(x, (list, tuple)):
        return [_cut_strings(v, chars) for v in x]
    if isinstance(x, dict):
        return {str(k)[:200]: _cut_strings(v, chars) for k, v in x.items()}
    return x


def _plain(x):
    if isinstance(x, (set, tuple)):
        return list(x)
    return str(x)


@dataclass
class TimingSettings:
    """Every setting of the timing procedure, one spelling (``EvalConfig`` names)."""

    timing_iters: int = 50
    timing_max_iters: int = 1000
    timing_budget_s: float = 0.5
    timing_placements: int = 4
    timing_ci_target: float = 0.0
    timing_ci_budget_s: float = 10.0
    timing_lead_us: float = -1.0
    timing_lead_from: str = "slower"
    timing_flush: str = "hold"
    timing_warmup_ms: float = 200.0
    warmup_iters: int = 5
    l2_flush_mb: int = 256
    baseline_compile: bool = True

    @classmethod
    def from_config(cls, cfg) -> TimingSettings:
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls)})

    def kw(self) -> dict:
        """As ``timing.interleaved`` / ``timing.solo`` take them."""
        return {"iters": self.timing_iters, "flush_mb": self.l2_flush_mb, "max_iters": self.timing_max_iters,
                "budget_s": self.timing_budget_s, "lead_us": self.timing_lead_us,
                "warmup_ms": self.timing_warmup_ms, "hold": self.timing_flush == "hold"}

    def method_extra(self) -> str:
        """Settings that change what a baseline measures: part of its cache key."""
        return "".join([f"lead{self.timing_lead_us:g}" if self.timing_lead_us else "",
                        f"warm{self.timing_warmup_ms:g}" if self.timing_warmup_ms else "",
                        "fill" if self.timing_flush == "fill" else ""])


class _Job:
    """to_dict / from_dict of a job record (its ``timing`` a nested TimingSettings)."""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        d = dict(d)
        d["timing"] = TimingSettings(**d.get("timing", {}))
        return cls(**d)


@dataclass
class ReferenceJob(_Job):
    """For the reference process: outputs of the problem's own Model (never a candidate)."""

    task_source: str
    seeds: list[int]
    init_seed: int
    out_dir: str  # where the output files go: a folder only the harness can reach
    device: str = "cpu"
    perturb: list[dict] = field(default_factory=list)  # size overrides to try, first valid wins (judged)
    odd: list[dict] = field(default_factory=list)  # odd sizes to try (informational generality check)
    perturb_seed: int = 0
    sample_seed: Optional[int] = None  # large outputs kept as their values at this seed's indices (secret)
    timed_checks: list[int] = field(default_factory=list)  # variation seeds of the timed checks (GPU: outputs)
    call_seeds: list[int] = field(default_factory=list)  # per trial, its call's secret random seed (draws.py)
    perturb_call_seed: int = 0  # the perturbed and odd sizes' calls' seed
    check_call_seeds: list[int] = field(default_factory=list)  # per timed check, its call's seed
    timing: TimingSettings = field(default_factory=TimingSettings)



@dataclass
class CandidateJob(_Job):
    """For a candidate worker: run this candidate, report outputs as files. No judged input is
    in it: the worker asks for each trial's seed and for the other sizes when it needs them
    (``draws.py``), so nothing in the job lets a candidate precompute at import."""

    task_source: str
    candidate_source: str
    trials: int
    init_seed: int
    device: str = "cpu"
    out_meta: list[dict] = field(default_factory=list)  # the reference's output shapes (allocator poison)
    other_sizes: bool = False  # the harness has a perturbed or odd size to judge at (asked for when it starts)
    timed_checks: int = 0  # how many timed rounds' outputs the harness will ask to keep (which: told at the go)
    audit: bool = True  # op profiler on some correctness calls, launch counts on all (custom-kernel evidence)
    input_bytes: int = 0  # one input set, as the reference process measured it (memory plan; 0: measure)
    output_bytes: int = 0  # one call's outputs, likewise
    memory_bytes: int = 0  # device bytes the harness admitted this evaluation with (0: no limit but the free memory)
    # the problem's Model's construction work, measured once per task by the reference process
    # (``audit.construction``); None: the worker measures it itself
    ref_init_work: Optional[float] = None
    timing: TimingSettings = field(default_factory=TimingSettings)



# Output leaves cross as {"kind": "tensor", "dtype": NAME, "shape": [..], "file": "N.bin"}
# (raw bytes of a contiguous tensor), {"kind": "scalar", "value": V} or
# {"kind": "unsupported", "dtype"/"type": NAME}. File names are relative to the sender's
# output folder; the harness checks each before reading (intake.py).
