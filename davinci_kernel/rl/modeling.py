"""Loading and saving the one trainable backbone.

Covers: precision choice (bf16 only where the device supports it: bf16 weights under LoRA,
fp32 master weights plus bf16 autocast for full fine-tuning), gradient checkpointing,
optional LoRA through peft, and saving / re-loading the model or adapter from a
checkpoint folder. Does not cover: the optimizer or the training loop.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def bf16_supported() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def mixed_precision(bf16: bool) -> str:
    """The accelerate ``mixed_precision`` setting for a config's ``bf16`` flag."""
    return "bf16" if bf16 and bf16_supported() else "no"


def load_tokenizer(path: str | Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str | Path, *, lora_r: int = 0, lora_alpha: int = 32, bf16: bool = True,
               grad_checkpointing: bool = True, adapter: Optional[str | Path] = None):
    """Base model at ``path`` (+ a saved adapter, or a fresh LoRA when ``lora_r > 0``)."""
    from transformers import AutoModelForCausalLM

    use_bf16_weights = bf16 and bf16_supported() and (lora_r > 0 or adapter is not None)
    dtype = torch.bfloat16 if use_bf16_weights else torch.float32
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    model.config.use_cache = False
    if grad_checkpointing:
        if hasattr(model, "activation_checkpointing_enable"):  # newer transformers
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter), is_trainable=True)
    elif lora_r > 0:
        from peft import LoraConfig, get_peft_model

        lcfg = LoraConfig(r=lora_r, lora_alpha=lora_alpha, lora_dropout=0.0, target_modules=LORA_TARGETS,
                          task_type="CAUSAL_LM")
        model = get_peft_model(model, lcfg)
    if adapter is not None or lora_r > 0:
        for p in model.parameters():  # adapters train in fp32
            if p.requires_grad and p.dtype != torch.float32:
                p.data = p.data.float()
    return model


def is_adapter_dir(path: Path) -> bool:
    return (Path(path) / "adapter_config.json").is_file()


def save_model(model, tokenizer, path: Path, state_dict=None) -> None:
    """Full weights (or the adapter only, for a peft model) + tokenizer, in HF format."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    kwargs = {"state_dict": state_dict} if state_dict is not None else {}
    model.save_pretrained(str(path), **kwargs)
    tokenizer.save_pretrained(str(path))
    cfg_file = path / "config.json"
    if cfg_file.is_file() and not hasattr(model, "peft_config"):  # a sharded model's class is FSDP<Name>
        from .sharding import base_class_name

        cfg = json.loads(cfg_file.read_text())
        if cfg.get("architectures") and cfg["architectures"] != [base_class_name(model)]:
            cfg["architectures"] = [base_class_name(model)]
            cfg_file.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def trainable_parameters(model) -> list:
    return [p for p in model.parameters() if p.requires_grad]
