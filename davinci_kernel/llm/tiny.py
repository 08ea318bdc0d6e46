"""A tiny random chat model built locally, for smoke runs, tests and overhead benchmarks.

Covers: ``make_tiny_model(dir)`` writes a Qwen3-architecture causal LM (hidden 64,
2 layers by default, about 100k parameters) with a byte-level BPE tokenizer trained in
about a second by ``tokenizers`` and a ChatML-style chat template, loadable with
``hf:DIR``. Nothing is downloaded. Does not cover: anything a real model is for; its
replies are noise, which is exactly what format-error paths need.
"""

from __future__ import annotations

from pathlib import Path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = [
    "import torch\nimport triton\nimport triton.language as tl\n",
    "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n",
    "@triton.jit\ndef relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n",
    "    pid = tl.program_id(0)\n    offs = pid * BLOCK + tl.arange(0, BLOCK)\n",
    "    mask = offs < n\n    x = tl.load(x_ptr + offs, mask=mask)\n    tl.store(y_ptr + offs, x, mask=mask)\n",
    "select_skills update_skill_library think selected_skills new_skills name reason",
    "You are an expert in GPU kernels. Write a faster kernel. The speedup was 1.5x.",
    '{"name": "select_skills", "arguments": {"think": "", "selected_skills": []}}',
]


def make_tiny_model(out_dir: str | Path, hidden: int = 64, layers: int = 2, vocab: int = 512,
                    seed: int = 0) -> Path:
    """Write a tiny model + tokenizer to ``out_dir`` (created) and return the path."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(_CORPUS * 20, trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>", unk_token=None)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(out))

    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=hidden // 4, max_position_embeddings=32768, tie_word_embeddings=True,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      bos_token_id=None)
    model = Qwen3ForCausalLM(cfg)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model.save_pretrained(str(out))
    return out
