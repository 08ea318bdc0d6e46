"""The L2 flush and the lead as one GPU kernel that holds every SM while it runs.

Covers: a Triton kernel launched with exactly as many blocks as the GPU can hold at once
(every SM's thread slots filled); each block writes its share of the flush buffer, then
busy-waits on the GPU's global timer to one deadline (its start + 1.25x the flush's
measured worst time + 10 us + the lead), then records when it started. All blocks start
together, so they also end together: while the kernel runs no other kernel can start
anywhere on the GPU, and a kernel a candidate launches on another stream during the
flush or the lead waits until it ends, which is after the timed call's start event: such
work lands in the event time or, if it outlives the end event, in the synchronized wall
time. (A flush written by ``fill_`` and a lead by ``torch.cuda._sleep``, one thread,
leave the other SMs free: work on another stream could run there unseen, before the start
event.) ``blocks_per_sm`` is the occupancy arithmetic; ``FlushHold.self_check`` times the
flush and reads back the start times: all blocks start together only when all of them
fit at once. Built in the worker before any candidate is imported; its launcher is
captured then.

Does not cover: copy-engine transfers (``cudaMemcpyAsync`` on another stream moves data
without SMs and can overlap the flush), work from another process (the GPU time-slices
processes; the gate keeps our own workers out), GPUs without a global timer (the worker
then falls back to ``fill_`` and ``_sleep``, and says so in the timing detail).
"""

from __future__ import annotations

MAX_REGS = 32  # registers per thread: 2,048 threads x 32 = 65,536, one SM's register file
BLOCK = 4096  # flush elements per block per step


def block_threads(sm_threads: int) -> int:
    """Threads per block that tile an SM's thread slots exactly: 1,024 where it holds 2,048
    (H100, H200, A100), 512 where it holds 1,536 (Ada, Ampere GA10x)."""
    return next((t for t in (1024, 512, 256, 128) if sm_threads % t == 0), 128)


def blocks_per_sm(threads: int, regs_per_thread: int, sm_threads: int = 2048, sm_regs: int = 65536,
                  sm_blocks: int = 32) -> int:
    """How many blocks of ``threads`` threads fit on one SM at once (threads, registers and
    the block limit). Registers are allocated per warp in units of 256."""
    per_warp = -(-max(1, regs_per_thread) * 32 // 256) * 256
    warps = -(-threads // 32)
    by_regs = sm_regs // (per_warp * warps)
    return max(1, min(sm_threads // threads, by_regs, sm_blocks))


def fills_sm(threads: int, per_sm: int, sm_threads: int = 2048) -> bool:
    """Every thread slot of an SM taken: no block of any other kernel can start there."""
    return threads * per_sm >= sm_threads


def _kernel():
    import triton
    import triton.language as tl
    from triton.language.extra.cuda import globaltimer

    @triton.jit(do_not_specialize=["n", "per_prog", "hold_ns"])
    def flush_hold_kernel(buf_ptr, n, per_prog, starts_ptr, hold_ns, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        t0 = globaltimer()
        offs = tl.arange(0, BLOCK)
        lo = pid.to(tl.int64) * per_prog
        for i in range(0, per_prog, BLOCK):
            idx = lo + i + offs
            tl.store(buf_ptr + idx, 1, mask=(i + offs < per_prog) & (idx < n))
        while globaltimer() - t0 < hold_ns:  # one deadline for all: they started together, they end together
            pass
        tl.store(starts_ptr + pid, t0)

    return flush_hold_kernel


class FlushHold:
    """``hold(buf, lead_us)``: queue the whole-GPU flush of ``buf`` (int32) plus a lead of
    ``lead_us`` microseconds on the current stream. Build it before a candidate is imported."""

    def __init__(self, torch, device: str):
        dev = torch.device(device)
        props = torch.cuda.get_device_properties(dev)
        self.sms = props.multi_processor_count
        self.sm_threads = getattr(props, "max_threads_per_multi_processor", 2048)
        sm_regs = getattr(props, "regs_per_multiprocessor", 65536)
        self._stream = torch._C._cuda_getCurrentRawStream
        self._index = dev.index if dev.index is not None else torch.cuda.current_device()
        self.threads = block_threads(self.sm_threads)
        kernel = _kernel()
        probe = torch.empty(BLOCK, dtype=torch.int32, device=dev)
        starts = torch.zeros(1, dtype=torch.int64, device=dev)
        compiled = kernel[(1,)](probe, probe.numel(), probe.numel(), starts, 0, BLOCK=BLOCK, num_warps=self.threads // 32,
                                maxnreg=MAX_REGS)
        self.n_regs = int(getattr(compiled, "n_regs", MAX_REGS) or MAX_REGS)
        self.per_sm = blocks_per_sm(self.threads, self.n_regs, self.sm_threads, sm_regs)
        self.grid = self.sms * self.per_sm
        self.occupies = fills_sm(self.threads, self.per_sm, self.sm_threads)
        self.starts = torch.zeros(self.grid, dtype=torch.int64, device=dev)  # each block's start (ns)
        compiled[(self.grid, 1, 1)]  # loads the binary
        # the launcher and its arguments, bound now: later patches of triton miss it, and the
        # launch hooks (triton.knobs, settable by a candidate) are passed as None
        self._launch, self._fn, self._meta = compiled.run, compiled.function, compiled.packed_metadata
        self.start_spread_us = None
        self.ns_per_elem = 1.0 / 1.5  # ~1.5 elements (6 bytes) per ns until measured

    def __call__(self, buf, lead_us: float) -> None:
        hold_ns = self.flush_ns(buf.numel()) + int(max(0.0, lead_us) * 1e3)
        self._run(buf, hold_ns)

    def _run(self, buf, hold_ns: int) -> None:
        n = buf.numel()
        self._launch(self.grid, 1, 1, self._stream(self._index), self._fn, self._meta, None, None, None,
                     buf, n, -(-n // self.grid), self.starts, hold_ns, BLOCK)

    def flush_ns(self, numel: int) -> int:
        """Time allowed for the flush part: 1.25x the worst measured per element, + 10 us."""
        return int(1.25 * self.ns_per_elem * numel) + 10_000

    def self_check(self, torch, buf) -> dict:
        """Time the flush alone (its worst of five, after one to warm up, sets the deadline)
        and read the blocks' start times: their spread is how long the last block waited
        for a free SM (well under a microsecond when all fit at once). Raises if the bound
        launcher does not work, so the worker falls back to fill_ and says why."""
        self.calibrate(torch, buf)
        t = self.starts.cpu()
        if int(t.min()) <= 0:
            raise RuntimeError("the flush kernel did not run in every block")
        self.start_spread_us = float(t.max() - t.min()) / 1e3
        return self.describe()

    def calibrate(self, torch, buf) -> None:
        """Set the flush deadline from the worst of five flushes of ``buf`` (after one to warm
        up). Done again at the start of every timing, which has the GPU to itself: measured
        beside other work (a worker's start-up) the deadline would come out too long."""
        times = []
        for _ in range(6):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(self._index)
            a.record()
            self._run(buf, 0)
            b.record()
            torch.cuda.synchronize(self._index)
            times.append(a.elapsed_time(b) * 1e6)
        self.ns_per_elem = max(times[1:]) / buf.numel()

    def describe(self) -> dict:
        return {"kind": "hold", "blocks": self.grid, "threads": self.threads, "per_sm": self.per_sm, "regs": self.n_regs,
                "fills_sms": self.occupies, "start_spread_us": self.start_spread_us,
                "flush_us_256mb": round(self.flush_ns(64 << 20) / 1e3, 1)}
