"""The local worker pool: spare workers replace recycled ones, fresh workers are unused."""

from __future__ import annotations

from davinci_kernel.evaluate.pool import LocalPool


def test_spare_replaces_a_recycled_worker_and_fresh_is_unused():
    pool = LocalPool(["cpu"], spares=1)
    try:
        spare = pool._spares["cpu"].queue[0]
        h = pool.acquire()
        pool.release(h, recycle=True)
        got = pool.acquire()
        assert got is spare and got.proc.is_alive() and got.proc.pid != h.proc.pid
        assert pool._spares["cpu"].qsize() == 1  # the next spare is already starting
        new = pool.fresh(got)
        assert new.jobs == 0 and new.proc.pid not in (h.proc.pid, got.proc.pid) and not got.proc.is_alive()
        pool.release(new)
        assert pool.replaced == 2 and len(pool) == 1
    finally:
        pool.close()
