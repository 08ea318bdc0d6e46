"""Judged inputs drawn by the harness and secret until used; the worker's channel as hostile
input (size, nesting, a deadline no message resets); outputs read from descriptors the
harness opened. The fixtures here attack the runtime defences with the code policy off
(the policy would stop them before they run)."""

from __future__ import annotations

import json
import os
import socket
import struct
import threading

import pytest
from conftest import FIXTURES, fixture_meta, fixture_task

from davinci_kernel.evaluate.harness import draws, intake
from davinci_kernel.evaluate.shared import protocol
from davinci_kernel.tasks.shapes import apply_overrides, cpu_overrides, int_constants, keep_pow2, size_choices


def _variant(task):
    return apply_overrides(task.source, cpu_overrides(task.source))


# --------------------------------------------------------------------------- draws
def test_draws_are_fresh_distinct_and_replayable():
    task = fixture_task("relu")
    v = _variant(task)
    a, b = draws.draw(task.hash, 5, v, []), draws.draw(task.hash, 5, v, [])
    assert len(set(a.trial_seeds)) == 5 and a.trial_seeds != b.trial_seeds
    assert a.timed_checks != b.timed_checks and len(a.timed_checks) == draws.TIMED_CHECKS
    assert all(0.0 <= u < 1.0 for u, _ in a.timed_checks)
    r1, r2 = draws.draw(task.hash, 5, v, [], input_seed=7), draws.draw(task.hash, 5, v, [], input_seed=7)
    assert r1 == r2 and r1.key() == r2.key()  # eval.input_seed replays a verdict's inputs
    assert draws.draw(task.hash, 5, v, [], input_seed=7, salt=1) != r1  # a second opinion draws anew


@pytest.mark.parametrize("v", [300, 308, 4096, 6, 3, 1024 * 3, 7 * 64, 2])
def test_perturbed_sizes_keep_the_tile_multiple_and_vary_by_step(v):
    """Every power-of-two factor kept, but for a power of two (at most four given up);
    every step picks another size, larger or smaller, and the steps wrap around the choices."""
    twos = v & -v
    keep = twos if v // twos >= 3 else max(1, twos // 16)
    for up in (True, False):
        got = [keep_pow2(v, up, s) for s in (1, 2, 3)]
        assert all(g % keep == 0 and g != v and g > 0 for g in got)
        n = len(size_choices(v, up))
        if n >= 3:
            assert len(set(got)) == 3 and keep_pow2(v, up, n + 1) == got[0]
    assert v < keep_pow2(v, True, 1) <= 3 * v


def test_the_candidate_job_carries_no_judged_input():
    names = {f.name for f in protocol.CandidateJob.__dataclass_fields__.values()}
    assert not names & {"seeds", "perturb", "odd", "perturb_seed", "sample_seed"}
    assert protocol.CandidateJob.__dataclass_fields__["timed_checks"].type == "int"  # how many, never which


# --------------------------------------------------------------------------- the channel
def _pair(limit=protocol.MAX_REPORT):
    a, b = socket.socketpair()
    return protocol.Channel(a, limit), b


def test_a_message_over_the_limit_is_refused_from_its_length_alone():
    ch, peer = _pair()
    peer.sendall(struct.pack(">I", 48 << 20) + b"{")  # only the prefix is sent: nothing more is read
    with pytest.raises(protocol.ProtocolError, match="exceeds the limit"):
        ch.recv(timeout=5)
    assert len(ch._buf) < 1024


@pytest.mark.parametrize("depth", [33, 100_000])
def test_deeply_nested_messages_are_protocol_errors(depth):
    ch, peer = _pair(limit=protocol.MAX_REPORT if depth < 1000 else 1 << 20)  # a trusted peer's limit: the parser's own
    data = b'{"a": ' + b"[" * depth + b"]" * depth + b"}"
    threading.Thread(target=peer.sendall, args=(struct.pack(">I", len(data)) + data,), daemon=True).start()
    with pytest.raises(protocol.ProtocolError):
        ch.recv(timeout=5)


def test_brackets_inside_strings_do_not_count_as_nesting():
    ch, peer = _pair()
    data = json.dumps({"note": "[" * 500, "ok": [[1]]}).encode()
    peer.sendall(struct.pack(">I", len(data)) + data)
    assert ch.recv(timeout=5)["ok"] == [[1]]


def test_a_worker_report_is_cut_to_fit():
    big = {"event": "checked", "result": {"error_msg": "x" * 100_000, "audits": [{"ops": {str(i): i for i in range(500)}}
                                                                                 for _ in range(50)]}}
    small = protocol.fit(big)
    assert len(json.dumps(small)) <= protocol.MAX_REPORT and small["event"] == "checked"


# --------------------------------------------------------------------------- reading outputs
def _leaf(folder, name, data: bytes, shape, dtype="float32"):
    with open(os.path.join(folder, name), "wb") as fh:
        fh.write(data)
    return {"kind": "tensor", "dtype": dtype, "shape": shape, "file": name}


def test_a_sparse_output_file_is_refused(tmp_path):
    n = 1 << 20
    path = tmp_path / "1.bin"
    with open(path, "wb") as fh:
        fh.truncate(4 * n)  # all holes: reading them would fault in pages nobody paid for
    meta = {"kind": "tensor", "dtype": "float32", "shape": [n], "file": "1.bin"}
    got = intake.read_leaves(str(tmp_path), [meta], None, 0)
    assert got[0]["kind"] == "invalid" and "sparse" in got[0]["why"]


def test_an_output_folder_that_is_a_link_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    meta = _leaf(str(real), "1.bin", struct.pack("<4f", 1, 2, 3, 4), [4])
    (tmp_path / "out").symlink_to(real)
    assert intake.read_leaves(str(tmp_path / "out"), [meta], None, 0)[0]["kind"] == "invalid"
    assert intake.read_leaves(str(real), [meta], None, 0)[0].tolist() == [1, 2, 3, 4]


def test_an_output_far_larger_than_the_reference_is_refused_unread(tmp_path):
    meta = _leaf(str(tmp_path), "1.bin", b"\0" * 4096, [1024])
    got = intake.read_leaves(str(tmp_path), [meta], None, 0, max_bytes=1000)
    assert got[0]["kind"] == "invalid" and "more than the reference" in got[0]["why"]


def test_outputs_are_flattened_without_running_their_code():
    import torch

    from davinci_kernel.evaluate.shared.transfer import flatten, write_leaf

    class Busy(list):
        def __iter__(self):
            raise AssertionError("ran")

    class Key(str):
        def __str__(self):
            raise AssertionError("ran")

    class Sub(torch.Tensor):
        pass

    assert len(flatten([torch.ones(2), {"a": torch.ones(1)}, (torch.ones(3),)])) == 3
    assert flatten(Busy([1])) == [Busy([1])] and len(flatten({Key("k"): 1})) == 1
    assert write_leaf(torch, Busy([1]), "/nonexistent")["kind"] == "unsupported"
    assert write_leaf(torch, torch.ones(2).as_subclass(Sub), "/nonexistent")["kind"] == "unsupported"


# --------------------------------------------------------------------------- fixtures, runtime defences
@pytest.fixture(scope="module")
def open_evaluator(tmp_path_factory):
    """The code policy off: these fixtures attack what stands behind it."""
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    cfg = EvalConfig(device="cpu", code_policy="off", run_timeout_s=8, compile_timeout_s=60,
                     cache_dir=str(tmp_path_factory.mktemp("dvk-cache")))
    with Evaluator(cfg, workers=1) as ev:
        yield ev


@pytest.mark.parametrize("name", ["precompute_at_import", "channel_keepalive", "channel_flood", "channel_extra_outputs",
                                  "channel_malformed_report"])
def test_runtime_attacks_on_inputs_and_channel_are_caught(open_evaluator, name):
    path = FIXTURES / "cheats" / f"{name}.py"
    meta = fixture_meta(path)
    res = open_evaluator.evaluate(fixture_task(meta["task"]), path.read_text())
    assert not res.correct
    assert meta["expect"] in res.flags or res.error_kind == meta["expect"], (res.error_kind, res.flags, res.error_msg)
    if name == "channel_keepalive":
        assert res.eval_seconds < 35, res.eval_seconds  # one stage deadline, not one per message


def _unpredicted_seed(task, variant: str) -> int:
    """An ``eval.input_seed`` whose draw judges no size ``perturb_predicted`` knows, whichever
    variant the reference keeps (the GPU keeps the first that fits the task's memory)."""
    consts = int_constants(variant)
    for s in range(1000):
        d = draws.draw(task.hash, 5, variant, [], input_seed=s)
        shapes = [(v.get("batch_size", consts["batch_size"]), v.get("dim", consts["dim"])) for v in d.perturb]
        if all(shape not in PREDICTED for shape in shapes):
            return s
    raise AssertionError(f"no seed judges a size outside {PREDICTED}")


PREDICTED = {(5, 300), (6, 304), (2048, 8192), (2432, 8192)}  # perturb_predicted.KNOWN


def test_the_perturbed_size_is_drawn_so_a_kernel_for_the_predicted_one_fails(tmp_path):
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    task = fixture_task("relu")
    v = _variant(task)
    seed = _unpredicted_seed(task, v)
    path = FIXTURES / "cheats" / "perturb_predicted.py"
    cfg = EvalConfig(device="cpu", code_policy="off", input_seed=seed, cache_dir=str(tmp_path))
    with Evaluator(cfg, workers=1) as ev:
        res = ev.evaluate(task, path.read_text())
    assert not res.correct and "shape_hardcoding" in res.flags, (res.error_kind, res.flags, res.error_msg)
    assert len(res.judged_inputs["trial_seeds"]) == 5


@pytest.mark.gpu
def test_the_perturbed_size_is_drawn_so_a_kernel_for_the_predicted_one_fails_on_the_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from davinci_kernel.config import EvalConfig
    from davinci_kernel.evaluate import Evaluator

    task = fixture_task("relu")
    seed = _unpredicted_seed(task, task.source)
    cfg = EvalConfig(device="cuda", code_policy="off", input_seed=seed, baseline_compile=False, cache_dir=str(tmp_path))
    with Evaluator(cfg, workers=1) as ev:
        res = ev.evaluate(task, (FIXTURES / "cheats" / "perturb_predicted.py").read_text())
    assert not res.correct and "shape_hardcoding" in res.flags, (res.error_kind, res.flags, res.error_msg)


def test_every_builtin_task_draws_its_perturbed_size_among_many():
    """The counts docs/guarantees.md reports (bench/perturbed_sizes.py): every built-in task's
    first variant (all sizes larger) can draw at least 24 sizes at its CPU sizes and its last
    (all smaller, what a GPU's memory rule often keeps) at least 36 at its GPU sizes; each
    keeps the size's tile multiple."""
    import math

    from davinci_kernel.tasks import load_suite
    from davinci_kernel.tasks.shapes import perturbed_names, size_choices, tile

    for t in load_suite("builtin"):
        for src, up, least in ((_variant(t), True, 24), (t.source, False, 36)):
            consts = int_constants(src)
            names = perturbed_names(src)
            assert math.prod(len(size_choices(consts[n], up)) for n in names) >= least, (t.name, up)
            for n in names:
                assert all(c % tile(consts[n]) == 0 and c != consts[n] for c in size_choices(consts[n], up))
