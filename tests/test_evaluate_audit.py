"""evaluate/audit.py: which torch work the CPU audit counts (outermost aten compute ops,
wherever they sit under user scopes, TorchScript or other threads) and how much work an op
without a FLOP count does (its inputs broadcast together)."""

from __future__ import annotations

import _thread

import pytest
import torch

from davinci_kernel.evaluate.shared.audit import audited_call, broadcast_numel, outermost_compute, profiled_work


@pytest.mark.parametrize("shapes,want", [
    ([], 1),
    ([[7]], 7),
    ([[5, 1, 3], [1, 4, 3]], 60),  # the broadcast of two views: a reduction over the full shape
    ([[2, 3], [3]], 6),
    ([[1], [1, 1, 1]], 1),
    ([[4, 2], [3, 2]], 1),  # incompatible: no broadcast
    ([[0, 3], [1, 3]], 0),
    ([[2, 1, 1, 9], [1, 5, 1, 1], [3, 1]], 270),
])
def test_broadcast_numel(shapes, want):
    assert broadcast_numel(shapes) == want


class _E:
    def __init__(self, name, parent=None):
        self.name, self.cpu_parent = name, parent


def test_outermost_compute_skips_user_scopes_and_callees():
    scope = _E("relu_tile")
    relu = _E("aten::relu", scope)  # under a user scope: still the caller's own work
    clamp = _E("aten::clamp_min", relu)  # relu's callee: part of relu's work
    mm = _E("aten::mm")
    view = _E("aten::view")  # memory op: no work
    deep = _E("aten::add", _E("forward", _E("outer")))
    assert [e.name for e in outermost_compute([scope, relu, clamp, mm, view, deep])] == \
        ["aten::relu", "aten::mm", "aten::add"]


def _scripted_relu(t: torch.Tensor) -> torch.Tensor:
    return torch.relu(t)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (33, 65)])
def test_work_is_seen_under_scopes_scripts_and_threads(shape, dtype):
    x = torch.randn(*shape).to(dtype)
    _, plain = audited_call(torch, lambda t: torch.relu(t), [x], all_threads=True)

    def scoped(t):
        with torch.autograd.profiler.record_function("tile"):
            return torch.relu(t)

    def threaded(t):
        box, lock = [], _thread.allocate_lock()
        lock.acquire()

        def body():
            box.append(torch.relu(t))
            lock.release()

        _thread.start_new_thread(body, ())
        lock.acquire()
        return box[0]

    scripted = torch.jit.script(_scripted_relu)
    assert plain["work"] >= x.numel() and "relu" in plain["ops"]
    for fn in (scoped, scripted, threaded):
        out, a = audited_call(torch, fn, [x], all_threads=True)
        assert torch.equal(out, torch.relu(x))
        assert a["work"] >= plain["work"] and a["ops"], (fn, a)
    _, one_thread = audited_call(torch, threaded, [x], all_threads=False)
    assert one_thread["work"] == 0  # the legacy profiler sees the calling thread alone


def test_a_reduction_over_broadcast_views_weighs_the_full_shape():
    a, b = torch.randn(6, 1, 5), torch.randn(1, 4, 5)
    _, got = audited_call(torch, torch.linalg.vecdot, [a, b], all_threads=True)
    assert got["work"] >= 6 * 4 * 5
    assert profiled_work([]) == 0
