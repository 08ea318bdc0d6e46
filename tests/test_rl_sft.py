"""SFT: data from trajectories, JSONL and an offline HF dataset; examples for all three agents
(policy, selection, summary); the diversity filter per role, skill collapse included; a loss
mask on the chosen assistant turn only; packing; a short training run that lowers the loss."""

import json

import pytest
import torch

from davinci_kernel.config import load_config
from davinci_kernel.errors import UsageError
from davinci_kernel.llm.spec import resolve_model
from davinci_kernel.records import Completion, Episode, EvalResult, TaskGroup, Turn
from davinci_kernel.rl.sft import Example, diversity_filter, encode_chat, load_examples, pack_examples, train_sft


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
    (run / "groups.jsonl").write_text(json.dumps(group.to_dict()) + "\n")
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
    prov = json.loads((tmp_path / "out" / "run.json").read_text())["provenance"]
    assert prov["torch"] == torch.__version__ and "git_sha" in prov
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(info["model_dir"]) is not None


def test_max_seconds_stops_between_epochs_and_saves_the_model(data, tmp_path):
    """sft.max_seconds: no epoch is begun that would run past it (the first always runs);
    the model is saved and the epochs done are reported. A negative limit is bad input."""
    torch.set_num_threads(1)
    jl, _, _ = data
    yaml = tmp_path / "sft.yaml"
    yaml.write_text(f"sft:\n  model: tiny\n  data: ['{jl}']\n  epochs: 50\n  max_seconds: 0.001\n"
                    f"  max_seq_len: 512\n  batch_rows: 1\n  bf16: false\n  grad_checkpointing: false\n")
    said = []
    info = train_sft(load_config(yaml), out=tmp_path / "out", echo=said.append)
    assert info["epochs"] == 1 and any("stopped after 1 of 50 epochs" in m for m in said), said
    epochs = {json.loads(x)["epoch"] for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()}
    assert epochs == {0}
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(info["model_dir"]) is not None
    with pytest.raises(UsageError, match="sft.max_seconds"):
        load_config(yaml, ["sft.max_seconds=-1"])


def test_dedupe_off_keeps_one_answer_under_several_prompts(tmp_path):
    """sft.dedupe=false: a curated set that answers two prompts with the same kernel keeps
    both examples (the default drops the second as a duplicate)."""
    torch.set_num_threads(1)
    same = _kernel(1)
    convs = [_conv("level1/1_relu", same), {**_conv("level1/1_relu", same),
                                            "messages": [{"role": "user", "content": "task with skills"},
                                                         {"role": "assistant", "content": f"```python\n{same}\n```"}]}]
    jl = tmp_path / "two.jsonl"
    jl.write_text("".join(json.dumps(c) + "\n" for c in convs))
    kept = {}
    for dedupe in (True, False):
        yaml = tmp_path / f"sft-{dedupe}.yaml"
        yaml.write_text(f"sft:\n  model: tiny\n  data: ['{jl}']\n  epochs: 1\n  max_seq_len: 512\n  batch_rows: 1\n"
                        f"  bf16: false\n  grad_checkpointing: false\n  dedupe: {str(dedupe).lower()}\n")
        kept[dedupe] = train_sft(load_config(yaml), out=tmp_path / f"out-{dedupe}")["samples"]
    assert kept == {True: 1, False: 2}


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


# --------------------------------------------------------------------------- only the chosen turn is trained
def _three_turn_group():
    """One episode: wrong at turns 1 and 2, correct (1.5x) at turn 3, with the conversation the
    rollout builds (each turn's prompt holds the earlier answers and their feedback)."""
    conv = [{"role": "system", "content": "You write Triton kernels."}, {"role": "user", "content": "task relu"}]
    answers = ["WRONG one", "WRONG two", "ANSWER three"]
    results = [EvalResult(compiled=False), EvalResult(compiled=True, correct=False),
               EvalResult(compiled=True, correct=True, speedup=1.5)]
    turns = []
    for t, (text, res) in enumerate(zip(answers, results)):
        turns.append(Turn(role="policy", task="level1/1_relu", messages=list(conv), completion=Completion(text=text),
                          result=res, turn=t, reward=1.0 if res.correct else 0.0))
        conv += [{"role": "assistant", "content": text}, {"role": "user", "content": f"feedback {t + 1}"}]
    return TaskGroup(task="level1/1_relu", episodes=[Episode("level1/1_relu", 0, 0, turns=turns)])


def test_success_at_turn_three_trains_only_turn_three(tmp_path):
    from transformers import AutoTokenizer

    from davinci_kernel.rl.sft import examples_from_group

    tok = AutoTokenizer.from_pretrained(resolve_model("tiny", tmp_path))
    (ex,) = examples_from_group(_three_turn_group())
    assert ex.role == "policy" and ex.score == 1.5 and ex.answer == "ANSWER three"
    assert [m["content"] for m in ex.messages if m["role"] == "assistant"] == ["WRONG one", "WRONG two", "ANSWER three"]
    assert [m.get("weight", 1) for m in ex.messages if m["role"] == "assistant"] == [0, 0, 1]
    ids, mask = encode_chat(tok, ex.messages)
    # expected, token by token: the whole context (turns 1-2 included) as the prompt the policy
    # saw at turn 3, then exactly the tokens of the third assistant message
    plain = [{"role": m["role"], "content": m["content"]} for m in ex.messages]
    prompt = tok.apply_chat_template(plain[:-1], tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template(plain, tokenize=False)
    p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    a_ids = tok(full[len(prompt):], add_special_tokens=False)["input_ids"]
    assert ids == p_ids + a_ids
    assert mask == [False] * len(p_ids) + [True] * len(a_ids)
    assert tok.decode([t for t, m in zip(ids, mask) if m]) == "ANSWER three<|im_end|>\n"
    assert "WRONG one" in tok.decode(ids) and "WRONG two" in tok.decode(ids)  # still there as context
    row = pack_examples([(ids, mask)], max_len=len(ids) + 1)[0]
    assert tok.decode(row.targets.tolist()) == "ANSWER three<|im_end|>\n"


# --------------------------------------------------------------------------- selection examples
def _sel_reply(names):
    return json.dumps({"name": "select_skills", "arguments": {
        "think": "t", "selected_skills": [{"name": n, "reason": "r"} for n in names]}})


def _selection_group(task="level1/1_relu", rewards=(0.2, 1.4, 1.4), null_reward=0.5, picks=None):
    """k = len(rewards) selection schemes plus the null scheme (last), two rollouts each."""
    picks = picks or [["tile_it"], ["vectorize", "fuse_ops"], ["fuse_ops", "vectorize"]]
    msgs = [{"role": "system", "content": "select"}, {"role": "user", "content": f"{task} candidates"}]
    sels = [Turn(role="select", task=task, messages=msgs, completion=Completion(text=_sel_reply(p)), scheme=i, turn=i)
            for i, p in enumerate(picks)]
    eps = []
    for si, r in enumerate(list(rewards) + [null_reward]):
        for ro in range(2):
            eps.append(Episode(task, si, ro, turns=[Turn(role="policy", task=task, messages=msgs[:1],
                                                         completion=Completion(text="x"), reward=r)]))
    return TaskGroup(task=task, schemes=[p for p in picks] + [[]], selections=sels, episodes=eps)


def test_selection_examples_from_the_best_schemes():
    from davinci_kernel.rl.sft import examples_from_group, selection_examples

    ex = selection_examples(_selection_group())
    assert [e.role for e in ex] == ["select", "select"] and all(e.score == 1.4 for e in ex)
    assert [json.loads(e.answer)["arguments"]["selected_skills"][0]["name"] for e in ex] == ["vectorize", "fuse_ops"]
    assert ex[0].messages[:-1] == [{"role": "system", "content": "select"},
                                   {"role": "user", "content": "level1/1_relu candidates"}]
    # the null scheme did better than every selection: nothing to copy
    assert selection_examples(_selection_group(null_reward=2.0)) == []
    assert selection_examples(_selection_group(rewards=(0.0, 0.0, 0.0), null_reward=0.0)) == []
    g = _selection_group()
    g.selections[1].parse_error = "bad call"
    assert len(selection_examples(g)) == 1
    assert {e.role for e in examples_from_group(_selection_group())} == {"select"}  # no correct policy turn
    # from JSONL too, with the role named
    obj = {"task": "t", "role": "select", "messages": ex[0].messages}
    from davinci_kernel.rl.sft import _from_json

    assert _from_json(obj, "x.jsonl")[0].role == "select"
    with pytest.raises(UsageError, match="role 'critic'"):
        _from_json(dict(obj, role="critic"), "x.jsonl")


def test_diversity_filter_per_role_for_selections():
    from davinci_kernel.rl.sft import selection_examples

    ex = selection_examples(_selection_group())  # same picks in another order: one kept
    ex += selection_examples(_selection_group(task="level1/2_add"))  # same picks, other task: kept
    code = [Example([{"role": "user", "content": "u"},
                     {"role": "assistant", "content": f"```python\n{_kernel(1)}\n```"}], "level1/1_relu", 1.0)]
    kept, rep = diversity_filter(ex + code * 2, threshold=0.85, max_per_task=8)
    assert rep.extra["by_role"]["select"] == {"total": 4, "near_duplicates": 2, "over_task_cap": 0,
                                              "over_cluster_cap": 0, "kept": 2, "extra": {}}
    assert rep.extra["by_role"]["policy"]["kept"] == 1 and rep.kept == 3
    assert sorted(e.task for e in kept if e.role == "select") == ["level1/1_relu", "level1/2_add"]
    # the per-task cap counts each role on its own: a policy example does not use a selection's slot
    kept, rep = diversity_filter(ex + code, threshold=0.85, max_per_task=1)
    assert [(e.role, e.task) for e in kept].count(("policy", "level1/1_relu")) == 1
    assert [(e.role, e.task) for e in kept].count(("select", "level1/1_relu")) == 1


# --------------------------------------------------------------------------- summaries: skill collapse
_TILING = ("## Motivation\nThe kernel reads each input tile many times from global memory.\n"
           "## Key Idea\nLoad a {b}x{b} tile into shared memory once, synchronize, and reuse it for every "
           "output element of the block; pick the block size from the row length.\n"
           "## Example\n```python\nacc = tl.dot(a_tile, b_tile)  # BLOCK = {b}\n```")
_FUSION = ("## Motivation\nSeveral elementwise ops each launch a kernel and round-trip through memory.\n"
           "## Key Idea\nFuse bias add, activation and scaling into the epilogue of the producing kernel so the "
           "intermediate never leaves registers.\n## Example\n```python\ny = tl.maximum(acc + bias, 0) * scale\n```")


def _summary_example(task, skills, reward):
    reply = json.dumps({"name": "update_skill_library", "arguments": {"think": "t", "new_skills": [
        {"name": n, "description": d, "scope": "general", "tags": ["memory"], "content": c} for n, d, c in skills]}})
    return Example([{"role": "user", "content": f"summarize {task}"}, {"role": "assistant", "content": reply}],
                   task, reward, "trajectory", "summary")


def test_summary_filter_removes_near_identical_skills():
    tile = "Reuse shared-memory tiles of the inputs"
    ex = [_summary_example("level1/1_mm", [("smem_tiling", tile, _TILING.format(b=64))], 2.0),
          # the same skill renamed, re-numbered, one word changed, on another task: skill collapse
          _summary_example("level1/5_mm", [("shared_tile_reuse", tile, _TILING.format(b=128)
                                            .replace("many times", "several times"))], 1.8),
          # a pair whose second skill repeats the first example's skill: dropped as well
          _summary_example("level2/7_gemm", [("epilogue_fusion", "Fuse the elementwise tail", _FUSION),
                                             ("tile_in_smem", tile, _TILING.format(b=32))], 1.5),
          _summary_example("level2/8_gemm", [("epilogue_fusion", "Fuse the elementwise tail", _FUSION)], 1.3)]
    assert ex[0].answer != ex[1].answer  # not identical text
    kept, rep = diversity_filter(ex, threshold=0.85, max_per_task=8)
    assert [e.task for e in kept] == ["level1/1_mm", "level2/8_gemm"]
    assert rep.extra["by_role"]["summary"]["near_duplicates"] == 2
    # different skills are all kept
    kept, _ = diversity_filter([ex[0], ex[3]], threshold=0.85, max_per_task=8)
    assert len(kept) == 2


def test_group_gives_examples_for_all_three_roles():
    from davinci_kernel.rl.sft import examples_from_group

    g = _selection_group()
    g.episodes[2].turns[0].result = EvalResult(compiled=True, correct=True, speedup=1.4)
    summ = _summary_example("level1/1_relu", [("smem_tiling", "tiles", _TILING.format(b=64))], 0.0)
    g.summaries = [Turn(role="summary", task=g.task, messages=summ.messages[:1],
                        completion=Completion(text=summ.answer), reward=1.6),
                   Turn(role="summary", task=g.task, messages=summ.messages[:1],
                        completion=Completion(text="no skill"), reward=0.0)]
    roles = [e.role for e in examples_from_group(g)]
    assert sorted(roles) == ["policy", "select", "select", "summary"]
