"""Tiny Qwen3 models built from a config, for smoke runs and tests (no hub download).

Covers: ``build_tiny(path, ...)``, which trains a byte-level BPE tokenizer in about a
second with ``tokenizers``, gives it a chat template, initialises a Qwen3 model of a few
hundred thousand parameters from a seed and saves both with ``save_pretrained``, and
``parse_tiny_spec`` (``tiny[:key=value,...]``, keys: hidden, layers, heads, vocab, seed).
``spec.resolve_model`` builds one under a run's folder when a model spec asks for it.

Its replies are noise, which is what format-error paths and overhead benchmarks need.
Does not cover: loading the model for training (``rl/trainer.py``) or generation (``hf_backend.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..errors import UsageError

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_CORPUS = [
    "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n",
    "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n",
    "    def forward(self, x):\n        return torch.relu(x)\n",
    "@triton.jit\ndef kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n",
    "    pid = tl.program_id(0)\n    offs = pid * BLOCK + tl.arange(0, BLOCK)\n",
    "    mask = offs < n\n    x = tl.load(x_ptr + offs, mask=mask)\n    tl.store(y_ptr + offs, x, mask=mask)\n",
    "select_skills think selected_skills name reason update_skill_library new_skills",
    "You are an expert in GPU kernels. Write ModelNew with a fast Triton kernel.",
    "Feedback: compiled, correct, speedup 1.5x, coverage 0.9. max diff 0.001. Error.",
    "skill description scope general task_specific tags content Motivation Key Idea Example",
    "system user assistant tool the a of to in is and for with on at by from as fused tiled",
]

_DEFAULTS = {"hidden": 64, "layers": 2, "heads": 4, "vocab": 512, "seed": 0}


def parse_tiny_spec(spec: str) -> dict:
    """``tiny`` / ``tiny:hidden=64,layers=2`` → build kwargs (unknown keys are a UsageError)."""
    opts = dict(_DEFAULTS)
    rest = spec.split(":", 1)[1] if ":" in spec else ""
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, _, value = item.partition("=")
        if key not in opts or not value.isdigit():
            raise UsageError(f"model spec '{spec}': '{item}' is not one of "
                             f"{', '.join(f'{k}=INT' for k in opts)}")
        opts[key] = int(value)
    return opts


def project_corpus() -> list[str]:
    """This package's own kernel-domain text: built-in tasks and their reference kernels,
    seed skills and agent prompts (about 0.5 MB), for a tokenizer whose tokens per character
    on our prompts are close to a real model's."""
    root = Path(__file__).resolve().parents[1]
    files = [*sorted((root / "tasks").rglob("*.py")), *sorted((root / "skills" / "seed").glob("*.md")),
             *sorted((root / "agents" / "prompts").glob("*.md"))]
    return [f.read_text(errors="replace") for f in files]


def train_tokenizer(vocab: int = 512, texts: Optional[list[str]] = None):
    """A byte-level BPE tokenizer with the chat template, as a ``PreTrainedTokenizerFast``,
    trained on a built-in snippet corpus (or on ``texts``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts if texts else _CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny(path: str | Path, hidden: int = 64, layers: int = 2, heads: int = 4, vocab: int = 512,
               seed: int = 0) -> Path:
    """Build and save a tiny Qwen3 + tokenizer at ``path`` (deterministic for a seed)."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    path = Path(path)
    tokenizer = train_tokenizer(vocab)
    cfg = Qwen3Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                      head_dim=hidden // heads, max_position_embeddings=4096, tie_word_embeddings=True,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                      bos_token_id=None)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(cfg)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    tmp = path.with_name(path.name + ".tmp")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if path.exists():
        import shutil

        shutil.rmtree(path)
    tmp.rename(path)
    return path
