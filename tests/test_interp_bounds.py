"""The CPU worker's bounds on interpreted Triton (evaluate/candidate/interp_bounds.py): every
load and store of a launch inside the storages of the tensors passed to it, none outside a
launch. Runs the real interpreter in this process, its classes restored afterwards."""

import pytest
import torch
import triton.language as tl
from triton.runtime import interpreter as it

from davinci_kernel.evaluate.candidate import interp_bounds


def scale(x_ptr, y_ptr, n, shift, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs + shift, mask=m) * 2.0, mask=m)


@pytest.fixture
def bounded(monkeypatch):
    B, G = it.InterpreterBuilder, it.GridExecutor
    for cls, names in ((B, ("create_masked_load", "create_masked_store", "create_atomic_cas", "create_atomic_rmw")),
                       (G, ("_init_args_hst", "__call__"))):
        for n in names:
            monkeypatch.setattr(cls, n, getattr(cls, n))  # put back at teardown
    monkeypatch.setattr(B, "_dvk_bounded", False, raising=False)
    assert interp_bounds.install(torch)
    return it.InterpretedFunction(scale)


def test_accesses_inside_the_launch_tensors_run(bounded):
    x, y = torch.arange(16, dtype=torch.float32), torch.empty(16)
    bounded[(1,)](x, y, 16, 0, BLOCK=16)
    torch.testing.assert_close(y, x * 2)
    bounded[(1,)](x[4:], y, 12, 0, BLOCK=16)  # a view: its storage counts, masked lanes are not touched
    torch.testing.assert_close(y[:12], x[4:] * 2)


def test_an_address_outside_every_launch_tensor_is_refused(bounded):
    x, y = torch.arange(16, dtype=torch.float32), torch.empty(16)
    other = torch.full((16,), 7.0)
    shift = (other.data_ptr() - x.data_ptr()) // 4  # pointer arithmetic reaching a tensor not passed
    with pytest.raises(Exception, match="outside every tensor"):
        bounded[(1,)](x, y, 16, shift, BLOCK=16)
    with pytest.raises(interp_bounds.OutOfBounds, match="outside any kernel launch"):
        interp_bounds.check([x.data_ptr()], None, 4)

