"""The log-prob softmax kernels (rl/logprob_kernels.py) against autograd through the plain
formula: under the Triton interpreter on CPU (a subprocess, since triton.jit reads the
switch when the kernels are defined), in torch on CPU, and compiled on a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(1, 5), (7, 3), (3, 4097), (5, 257), (2, 8192)]  # (rows, vocab): odd, tiny, just past one block

# Runs in a fresh interpreter: checks every (shape, dtype, temperature) and the fused head,
# printing one JSON line; any mismatch raises with its message.
_CHECK = r"""
import json, sys, torch
from davinci_kernel.rl import logprob_kernels as K
from davinci_kernel.rl.losses import linear_logprobs
dtype = getattr(torch, sys.argv[1]); shapes = json.loads(sys.argv[2])
assert K.use_triton(torch.zeros(1)), "interpreter not in use"
tol = 1e-5 if dtype == torch.float32 else 2e-2
done = 0
for c, v in shapes:
    for T in (1.0, 0.7):
        g = torch.Generator().manual_seed(c * 1000 + v)
        z = (torch.randn(c, v, generator=g) * 3).to(dtype)
        t = torch.randint(0, v, (c,), generator=g)
        gr = torch.randn(c, generator=g)
        zz = z.float().clone().requires_grad_(True)
        ref = (zz / T).log_softmax(-1).gather(-1, t[:, None]).squeeze(-1)
        (ref * gr).sum().backward()
        lp, lse = K.chunk_stats(z, t, T)
        torch.testing.assert_close(lp, ref.detach(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lse, torch.logsumexp(z.float() / T, -1), atol=1e-5, rtol=1e-5)
        d = K.chunk_dlogits_(z.clone(), lse, t, gr, T)
        assert d.dtype == dtype
        torch.testing.assert_close(d.float(), zz.grad, atol=tol, rtol=tol)
        done += 1
# the fused head end to end (fp32 weights, with a bias): values and all three gradients
h = torch.randn(6, 16, dtype=torch.float64).float().requires_grad_(True)
w = (torch.randn(300, 16) * 0.3).requires_grad_(True)
b = torch.randn(300).requires_grad_(True)
t = torch.randint(0, 300, (6,))
gr = torch.randn(6)
got = linear_logprobs(h, w, b, t, 0.7)
(got * gr).sum().backward()
grads = [x.grad.clone() for x in (h, w, b)]
for x in (h, w, b):
    x.grad = None
ref = ((h @ w.t() + b) / 0.7).log_softmax(-1).gather(-1, t[:, None]).squeeze(-1)
(ref * gr).sum().backward()
torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
for a, x in zip(grads, (h, w, b)):
    torch.testing.assert_close(a, x.grad, atol=1e-5, rtol=1e-4)
print(json.dumps({"checked": done}))
"""


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_kernels_match_autograd_in_interpreter(dtype):
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", _CHECK, dtype, json.dumps(SHAPES)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"checked": 2 * len(SHAPES)}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_path_matches_autograd(shape, dtype):
    """Without CUDA (and without the interpreter) the same functions run in torch."""
    from davinci_kernel.rl import logprob_kernels as K

    c, v = shape
    torch.manual_seed(v)
    z = (torch.randn(c, v) * 3).to(dtype)
    t = torch.randint(0, v, (c,))
    gr = torch.randn(c)
    assert not K.use_triton(z) or os.environ.get("TRITON_INTERPRET") == "1"
    zz = z.float().clone().requires_grad_(True)
    ref = (zz / 0.7).log_softmax(-1).gather(-1, t[:, None]).squeeze(-1)
    (ref * gr).sum().backward()
    lp, lse = K.chunk_stats(z, t, 0.7)
    torch.testing.assert_close(lp, ref.detach(), atol=1e-5, rtol=1e-5)
    out = torch.empty_like(z)
    d = K.chunk_dlogits_(z, lse, t, gr, 0.7, out=out)
    assert d is out and d.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(d.float(), zz.grad, atol=tol, rtol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("rows,vocab", [(1, 151936), (777, 151936), (64, 4099)])
def test_kernels_on_gpu_match_torch(rows, vocab):
    """Compiled kernels on a real vocabulary size, bf16 logits, against float32 autograd."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from davinci_kernel.rl import logprob_kernels as K

    torch.manual_seed(0)
    z = (torch.randn(rows, vocab, device="cuda") * 4).to(torch.bfloat16)
    t = torch.randint(0, vocab, (rows,), device="cuda")
    gr = torch.randn(rows, device="cuda")
    assert K.use_triton(z)
    zz = z.float().clone().requires_grad_(True)
    ref = zz.log_softmax(-1).gather(-1, t[:, None]).squeeze(-1)
    (ref * gr).sum().backward()
    lp, lse = K.chunk_stats(z, t, 1.0)
    torch.testing.assert_close(lp, ref.detach(), atol=1e-4, rtol=1e-4)
    d = K.chunk_dlogits_(z.clone(), lse, t, gr, 1.0)
    torch.testing.assert_close(d.float(), zz.grad, atol=1e-2, rtol=2e-2)


@pytest.mark.gpu
def test_fused_head_on_gpu_matches_logits_path():
    """The fused head under bf16 autocast (Triton softmax, fp32-output weight-gradient
    matmul) against the model's own logits through the plain formula."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from davinci_kernel.rl.losses import linear_logprobs

    torch.manual_seed(0)
    k, hdim, vocab = 3000, 256, 50000  # two row chunks of 2k
    h = torch.randn(k, hdim, device="cuda").requires_grad_(True)
    w = (torch.randn(vocab, hdim, device="cuda") * 0.05).requires_grad_(True)
    t = torch.randint(0, vocab, (k,), device="cuda")
    gr = torch.randn(k, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = linear_logprobs(h, w, None, t)
        (got * gr).sum().backward()
        gh, gw = h.grad.clone(), w.grad.clone()
        h.grad = w.grad = None
        ref = (h @ w.t()).float().log_softmax(-1).gather(-1, t[:, None]).squeeze(-1)
        (ref * gr).sum().backward()
    torch.testing.assert_close(got, ref, atol=2e-2, rtol=2e-2)
    for a, b in ((gh, h.grad), (gw, w.grad)):
        assert (a - b).norm() / b.norm() < 2e-2


def test_a_kernel_that_cannot_launch_falls_back_to_torch(monkeypatch, caplog):
    """A Triton failure (an old GPU, a missing feature) turns the kernels off once, with a
    warning, and the torch math gives the same answer."""
    from davinci_kernel.rl import logprob_kernels as K

    class Broken:  # stands in for a kernel whose compile fails at first launch
        def __getitem__(self, grid):
            def launch(*a, **kw):
                raise RuntimeError("no bf16 on this device")
            return launch

    monkeypatch.setattr(K, "_INTERPRETED", True)  # CPU tensors take the kernel path
    monkeypatch.setattr(K, "ENABLED", True)
    monkeypatch.setattr(K, "_stats_kernel", Broken())
    monkeypatch.setattr(K, "_dlogits_kernel", Broken())
    torch.manual_seed(0)
    z, t, g = torch.randn(4, 33), torch.randint(0, 33, (4,)), torch.randn(4)
    with caplog.at_level("WARNING"):
        lp, lse = K.chunk_stats(z, t, 1.0)
    assert "no bf16 on this device" in caplog.text and not K.ENABLED
    torch.testing.assert_close(lp, z.log_softmax(-1).gather(-1, t[:, None]).squeeze(-1))
    monkeypatch.setattr(K, "ENABLED", True)  # the backward path falls back on its own too
    d = K.chunk_dlogits_(z.clone(), lse, t, g, 1.0)
    assert not K.ENABLED
    torch.testing.assert_close(d, (torch.nn.functional.one_hot(t, 33) - z.softmax(-1)) * g[:, None])
