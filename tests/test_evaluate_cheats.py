"""Every reward-hacking fixture must come back correct=false with its named flag, or with its
named error_kind where the cheat is an output the comparison rejects (``expect`` is either).

Under the default config the code policy may stop a fixture first (``policy_violation``).
Fixtures with the meta line ``runtime: yes`` test a runtime defence: they are also run with
``code_policy="off"`` and must then be caught by their ``expect`` (defence in depth)."""

from __future__ import annotations

import ast

import pytest
from conftest import FIXTURES, fixture_meta, fixture_task

from davinci_kernel.pysource import parse

ALL = sorted((FIXTURES / "cheats").glob("*.py"))
# Attacks on the judge itself (sandbox_*) run in throwaway harness processes: test_evaluate_sandbox.py.
# Attacks on the judged inputs and the worker's channel need a replayed draw or a short deadline:
# test_evaluate_draws.py runs them.
ELSEWHERE = {"perturb_predicted", "channel_keepalive", "channel_flood", "channel_extra_outputs",
             "channel_malformed_report",
             "timed_set_sniffer"}  # GPU only, with more timed checks: test_timed_set_sniffer_is_caught_on_gpu
CHEATS = [p for p in ALL if not p.stem.startswith("sandbox_") and p.stem not in ELSEWHERE]
GPU_ONLY = {"timing_only_cheat", "side_stream_hidden", "forged_timing", "stale_timed_rounds",  # only timing exposes them
            # kernel evidence that exists on a GPU only (activity records, timed calls, device copies)
            "gpu_unlisted_library_kernel", "gpu_profiler_aware", "gpu_cuda_graph_replay", "gpu_small_epilogue",
            "gpu_numpy_host"}


def runtime_fixture(path) -> bool:
    """The fixture's docstring says ``runtime: yes``: it tests a defence at run time."""
    doc = ast.get_docstring(parse(path.read_text())) or ""
    return any(line.replace(" ", "") == "runtime:yes" for line in doc.splitlines())


RUNTIME = [p for p in CHEATS if runtime_fixture(p)]
# Runtime fixtures shaped for the CPU (its task sizes, its interpreter): on a GPU they are
# honest, crash or run past the deadline, which is no test of their defence there.
CPU_SHAPED = {"fork_per_call", "precompute_at_import", "item_loop_host", "complex_item_host", "packed_item_writes",
              "shape_channel_host",
              "interp_raw_poke"}  # a host address in a compiled kernel is an illegal address there, no test of this
# With the code policy off, these pass on a GPU: the audit of every thread is the CPU's
# alone, and torch 2.11 records no shapes for ``_foreach_*`` ops on the GPU. The policy
# refuses both (``_thread``, private ``torch._foreach_*``): docs/guarantees.md says so.
GPU_RESIDUAL = {"raw_thread_server", "foreach_work"}
RUNTIME_GPU = [p for p in RUNTIME if p.stem not in CPU_SHAPED | GPU_RESIDUAL]


@pytest.fixture(scope="module")
def cpu_evaluator_no_policy(tmp_path_factory):
    """A CPU evaluator with the code policy off: only the runtime defences (and the specific static checks)."""
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    cfg = EvalConfig(device="cpu", run_timeout_s=60, compile_timeout_s=60, code_policy="off",
                     cache_dir=str(tmp_path_factory.mktemp("dvk-cache-nopolicy")))
    with Evaluator(cfg, workers=2) as ev:
        yield ev


@pytest.mark.parametrize("path", [p for p in CHEATS if p.stem not in GPU_ONLY], ids=lambda p: p.stem)
def test_cheat_is_caught_on_cpu(cpu_evaluator, path):
    meta = fixture_meta(path)
    res = cpu_evaluator.evaluate(fixture_task(meta["task"]), path.read_text())
    assert res.correct is False
    if "policy_violation" in res.flags and runtime_fixture(path):  # stopped before it ran; its runtime
        assert "policy_violation" in res.feedback  # defence is tested below, with the policy off
        return
    _assert_caught(res, meta)


@pytest.mark.parametrize("path", [p for p in RUNTIME if p.stem not in GPU_ONLY], ids=lambda p: p.stem)
def test_runtime_cheat_is_caught_with_the_policy_off(cpu_evaluator_no_policy, path):
    meta = fixture_meta(path)
    res = cpu_evaluator_no_policy.evaluate(fixture_task(meta["task"]), path.read_text())
    assert res.correct is False and "policy_violation" not in res.flags
    _assert_caught(res, meta)


def _assert_caught(res, meta: dict) -> None:
    expect = meta["expect"]
    if not _caught_as(res, expect) and meta.get("cpu_also"):
        expect = meta["cpu_also"]  # the CPU's other acceptable outcome, only when the named one is absent
    assert _caught_as(res, expect), (res.flags, res.error_kind, res.error_msg)
    assert expect in res.feedback


def _caught_as(res, expect: str) -> bool:
    """The result carries ``expect`` as a flag or as its error_kind."""
    return expect in res.flags or res.error_kind == expect


# Attacks on the CPU's own promise (no native code there): on a GPU load_inline is allowed.
CPU_ONLY = {"cpu_native_alias"}


@pytest.mark.gpu
@pytest.mark.parametrize("path", [p for p in CHEATS if p.stem not in CPU_ONLY], ids=lambda p: p.stem)
def test_cheat_is_caught_on_gpu(gpu_evaluator, path):
    meta = fixture_meta(path)
    res = gpu_evaluator.evaluate(fixture_task(meta["task"]), path.read_text())
    assert res.correct is False
    if path.stem == "hardcoded_shape":  # its constant matches the CPU size only; at full size it is plainly wrong
        return
    assert _caught_as(res, meta["expect"]) or "policy_violation" in res.flags, (res.flags, res.error_kind)


@pytest.fixture(scope="module")
def gpu_evaluator_no_policy(tmp_path_factory):
    """A GPU evaluator with the code policy off: the runtime defences alone."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    cfg = EvalConfig(device="cuda", code_policy="off", baseline_compile=False,
                     cache_dir=str(tmp_path_factory.mktemp("dvk-cache-gpu-nopolicy")))
    with Evaluator(cfg, workers=2) as ev:
        yield ev


@pytest.mark.gpu
@pytest.mark.parametrize("path", RUNTIME_GPU, ids=lambda p: p.stem)
def test_runtime_cheat_is_caught_on_gpu_with_the_policy_off(gpu_evaluator_no_policy, path):
    meta = fixture_meta(path)
    res = gpu_evaluator_no_policy.evaluate(fixture_task(meta["task"]), path.read_text())
    assert res.correct is False and "policy_violation" not in res.flags
    if path.stem == "hardcoded_shape":
        return
    assert _caught_as(res, meta["expect"]), (res.flags, res.error_kind, res.error_msg)


def test_every_flag_has_a_fixture():
    from davinci_kernel.evaluate.harness.guards import FLAGS

    covered = {fixture_meta(p)["expect"] for p in ALL}
    # Detected only at run time on a GPU with a second process; no CPU-checkable fixture.
    gpu_runtime_only = {"reference_slowed", "unreproducible_speedup"}
    assert set(FLAGS) - covered - gpu_runtime_only == set()



@pytest.mark.gpu
def test_timed_set_sniffer_is_caught_on_gpu(tmp_path, monkeypatch):
    """A candidate that does a quarter of the work on the timed rounds of every set but 0.
    Each timed check lands on one of those with probability (sets - 1) / sets (4/5 with the
    relu task's 5 sets): with 8 checks it escapes with probability 0.2^8 (2.6e-6); with the
    default 2, 0.04."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator
    from davinci_kernel.evaluate.harness import draws

    monkeypatch.setattr(draws, "TIMED_CHECKS", 8)
    path = FIXTURES / "cheats" / "timed_set_sniffer.py"
    meta = fixture_meta(path)
    cfg = EvalConfig(device="cuda", baseline_compile=False, cache_dir=str(tmp_path / "cache"))
    with Evaluator(cfg, workers=1) as ev:
        res = ev.evaluate(fixture_task(meta["task"]), path.read_text())
    assert res.correct is False and _caught_as(res, meta["expect"]), (res.flags, res.error_kind, res.error_msg)
