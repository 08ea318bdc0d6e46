"""SFT: data from trajectories, JSONL and an offline HF dataset; diversity filter;
assistant-only loss mask; packing; a short training run that lowers the loss."""

import json

import pytest
import torch

from davinci_kernel.config import load_config
from davinci_kernel.errors import UsageError
from davinci_kernel.records import Completion, EvalResult, Episode, TaskGroup, Turn
from davinci_kernel.rl.sft import (Example, diversity_filter, encode_chat, load_examples, pack_examples,
                                   train_sft)
from davinci_kernel.llm.tiny import resolve_model


def _conv(task, code, user="Write ModelNew."):
    return {"task": task, "messages": [{"role": "system", "content": "You write Triton kernels."},
                                       {"role": "user", "content": user},
                                       {"role": "assistant", "content": f"```python\n{code}\n```"}]}


def _kernel(i, op="relu"):
    body = "\n".join(f"    v{k} = tl.load(x_ptr + offs + {k * (i + 1)}, mask=mask)" for k in range(6))
    return f"@triton.jit\ndef {op}_kernel_{i}(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n{body}\n    tl.store(y_ptr + offs, v0)"


@pytest.fixture
def data(tmp_path):
    convs = [_conv("level1/1_relu", _kernel(1)), _conv("level1/1_relu", _kernel(1) + "\n"),  # near duplicate
             _conv("level1/1_relu", _kernel(2, "gelu")), _conv("level1/1_relu", _kernel(3, "silu")),
             _conv("level1/2_add", _kernel(4, "add")), {"messages": [{"role": "user", "content": "no answer"}]}]
    jl = tmp_path / "conv.jsonl"
    jl.write_text("".join(json.dumps(c) + "\n" for c in convs))
    ok = EvalResult(compiled=True, correct=True, speedup=1.7)
    bad = EvalResult(compiled=True, correct=False)
    msgs = [{"role": "user", "content": "task 3"}]
    group = TaskGroup(task="level2/3_fused", episodes=[
        Episode("level2/3_fused", 0, 0, turns=[Turn(role="policy", task="level2/3_fused", messages=msgs,
                                                     completion=Completion(text=f"```python\n{_kernel(5, 'mm')}\n```"),
                                                     result=ok)]),
        Episode("level2/3_fused", 0, 1, turns=[Turn(role="policy", task="level2/3_fused", messages=msgs,
                                                     completion=Completion(text="wrong"), result=bad)])])
    run = tmp_path / "run"
    run.mkdir()
    (run / "groups.jsonl").write_text(group.to_json() + "\n")
    import datasets

    hf_dir = tmp_path / "hfds"
    datasets.Dataset.from_list([_conv("level3/9_mlp", _kernel(6, "mlp"))]).save_to_disk(str(hf_dir))
    return jl, run, hf_dir


def test_load_examples_from_all_sources(data):
    jl, run, hf_dir = data
    ex = load_examples([str(jl), str(run), f"hf:{hf_dir}"])
    tasks = [e.task for e in ex]
    assert tasks.count("level1/1_relu") == 4 and "level2/3_fused" in tasks and "level3/9_mlp" in tasks
    assert len(ex) == 7  # the conversation without an answer and the failed episode are dropped
    with pytest.raises(UsageError):
        load_examples(["/no/such/file.jsonl"])


def test_diversity_filter(data):
    jl, _, _ = data
    ex = load_examples([str(jl)])
    kept, rep = diversity_filter(ex, threshold=0.8, max_per_task=2)
    assert rep.near_duplicates == 1 and rep.over_task_cap == 1
    assert [e.task for e in kept].count("level1/1_relu") == 2 and rep.kept == 3
    many = [Example(e.messages, f"t{i}", 0.0) for i, e in enumerate(ex[2:] * 1)]
    clustered, rep2 = diversity_filter(many, threshold=0.99, max_per_task=0, clusters=2, max_per_cluster=1)
    assert rep2.kept == len(clustered) <= 2


def test_assistant_only_mask_and_packing(tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve_model("tiny", tmp_path))
    msgs = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "ANSWER one"},
            {"role": "user", "content": "again"}, {"role": "assistant", "content": "ANSWER two"}]
    ids, mask = encode_chat(tok, msgs)
    trained = tok.decode([t for t, m in zip(ids, mask) if m])
    assert trained == "ANSWER one<|im_end|>\nANSWER two<|im_end|>\n"
    assert tok.decode(ids) == tok.apply_chat_template(msgs, tokenize=False)
    rows = pack_examples([(ids, mask), (ids, mask)], max_len=len(ids) * 2, layout="packed")
    assert len(rows) == 1 and rows[0].position_ids[0].tolist().count(0) == 2
    r = rows[0]
    assert all(r.input_ids[0, p + 1] == t for p, t in zip(r.loss_pos.tolist(), r.targets.tolist()))
    assert len(r.targets) == 2 * sum(mask[1:])
    rows = pack_examples([(ids, mask), (ids[:-3], mask[:-3])], max_len=len(ids) * 2)  # padded (B, L)
    assert len(rows) == 1 and tuple(rows[0].input_ids.shape) == (2, len(ids))
    r = rows[0]
    flat = r.input_ids.reshape(-1)
    assert all(flat[p + 1] == t for p, t in zip(r.loss_pos.tolist(), r.targets.tolist()))
    assert len(r.targets) == sum(mask[1:]) + sum(mask[1:-3]) and r.tokens == 2 * len(ids) - 3


def test_sft_training_lowers_loss(data, tmp_path):
    torch.set_num_threads(1)
    jl, run, hf_dir = data
    yaml = tmp_path / "sft.yaml"
    yaml.write_text(f"sft:\n  model: tiny\n  data: ['{jl}', '{run}', 'hf:{hf_dir}']\n  lr: 0.01\n  epochs: 6\n"
                    f"  max_seq_len: 512\n  batch_rows: 1\n  bf16: false\n  grad_checkpointing: false\n")
    cfg = load_config(yaml)
    info = train_sft(cfg, out=tmp_path / "out")
    losses = [json.loads(l)["loss"] for l in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert losses[-1] < 0.7 * losses[0], losses
    assert info["samples"] == 6 and info["filter"]["near_duplicates"] == 1
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(info["model_dir"]) is not None


def test_sft_cli_with_lora(data, tmp_path, capsys):
    from davinci_kernel.cli import main

    jl, _, _ = data
    yaml = tmp_path / "sft.yaml"
    yaml.write_text(f"sft:\n  model: tiny\n  data: ['{jl}']\n  epochs: 1\n  lora_r: 4\n  bf16: false\n")
    with pytest.raises(SystemExit) as e:
        main(["train", "sft", "--config", str(yaml), "--out", str(tmp_path / "o")])
    assert e.value.code == 0, capsys.readouterr().err
    assert (tmp_path / "o" / "model" / "adapter_config.json").is_file()
    with pytest.raises(SystemExit) as e:
        main(["train", "sft", "--config", str(yaml), "sft.minhash_threshold=2"])
    assert e.value.code == 2 and "sft.minhash_threshold=2.0: must be in (0, 1]" in capsys.readouterr().err
