"""What the runs on our own kernel variants share (``learning_run.py``, ``coevolution.py``).

The variants are Triton kernels of known speed for built-in tasks, listed in a
``manifest.json`` (``bench/learning/variants/``). Covers: reading a manifest and the
sources, telling which variant a sampled kernel is, a suite folder holding chosen
built-in tasks, the summary agent's skill for a variant (our own text, its Example the
variant's first kernel), the small model and its SFT config, and file and machine helpers. Does not cover: what a run does with them.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ROOT / "bench" / "learning" / "variants"
# a few million parameters (4.0M: hidden 256, 4 layers), so the SFT model's float32 weights
# (15.3 MiB) stay under the 16 MiB a file may have to travel between device calls; long
# positions for prompts that carry skills and a second turn
MODEL_SHAPE = dict(vocab_size=4096, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64, tie_word_embeddings=True,
                   max_position_embeddings=16384)
TINY_SHAPE = dict(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=1, head_dim=16, tie_word_embeddings=True, max_position_embeddings=16384)


# ----------------------------------------------------------------------------- variants
def manifest(folder: Path = VARIANTS, tiny: bool = False) -> dict[str, list[dict]]:
    """task name -> its variants ({name, file, correct, what}); the first two tasks when ``tiny``."""
    tasks = json.loads((Path(folder) / "manifest.json").read_text())["tasks"]
    return dict(list(tasks.items())[:2]) if tiny else tasks


def variant_sources(tasks: dict, folder: Path = VARIANTS) -> dict[str, dict[str, str]]:
    """task -> {variant name: source} (a variant's ``file`` is relative to ``folder``)."""
    return {t: {v["name"]: (Path(folder) / v["file"]).read_text() for v in vs} for t, vs in tasks.items()}


def normalized(code: str) -> str:
    return re.sub(r"\s+", " ", code).strip()


def classify(code: str | None, sources: dict[str, str]) -> str:
    """Which variant a sampled kernel is (whitespace aside), 'other' for anything else,
    'none' where no code was parsed."""
    if not code:
        return "none"
    n = normalized(code)
    return next((name for name, src in sources.items() if normalized(src) == n), "other")


def suite_dir(names, out: Path) -> Path:
    """A suite folder holding only the chosen built-in tasks (same names, same sources)."""
    from davinci_kernel.tasks.loader import BUILTIN_DIR

    if out.exists():
        shutil.rmtree(out)
    for name in names:
        dst = out / f"{name}.py"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(BUILTIN_DIR / f"{name}.py", dst)
    return out


def load_tasks(names, d: Path, folder: str = "suite"):
    """The chosen built-in tasks as ``Task`` records, in the order given (through a suite
    folder ``d/folder``, as the trainer loads them)."""
    from davinci_kernel.tasks.loader import load_suite

    names = list(names)
    by_name = {t.name: t for t in load_suite(str(suite_dir(names, d / folder)))}
    return [by_name[n] for n in names]


# ----------------------------------------------------------------------------- skills
def fastest_variant(variants: list[dict], task: str, speedups: dict | None) -> dict:
    """The correct variant the evaluator timed fastest (the manifest's first correct one
    where no speedups are known)."""
    ok = [v for v in variants if v["correct"]]
    if speedups and any(speedups.get((task, v["name"])) for v in ok):
        return max(ok, key=lambda v: speedups.get((task, v["name"])) or 0.0)
    return ok[0]


def module_name(task) -> str:
    """``level1/3_Softmax`` -> ``Softmax``."""
    return task.name.rsplit("/", 1)[-1].split("_", 1)[-1]


def skill_call(task, variant: dict, code: str) -> dict:
    """The summary agent's answer for an episode that wrote ``variant``: one skill (our own
    text, from the manifest's description of the variant) whose example is its first
    Triton kernel."""
    from davinci_kernel.agents.summary import TOOL_NAME

    skill = variant_skill(task, variant, code)
    return {"name": TOOL_NAME, "arguments": {"think": f"the faster kernel does this: {variant['what'].rstrip('.')}",
                                             "new_skills": [skill]}}


def variant_skill(task, variant: dict, code: str, example: str | None = None) -> dict:
    """The skill (a dict of the exchange format) that names what ``variant`` does; its
    Example is ``example`` (default: the first Triton kernel of ``code``)."""
    from davinci_kernel.agents.summary import snake_case

    op = task.op_type or "kernel"
    what = variant["what"].rstrip(".")
    module = module_name(task)
    return {"name": snake_case(f"{module} {variant['name']}"),
            "description": f"For {op} modules: {what}.",
            "scope": f"task_specific/{snake_case(op)}",
            "tags": [op, "triton", *variant["name"].split("_")[:2]],
            "content": (f"## Motivation\nA {op} module whose kernel moves more memory or launches more "
                        f"programs than the operation needs.\n## Key Idea\n{what[0].upper() + what[1:]}.\n"
                        f"## Example\n```python\n{example or first_kernel(code)}\n```")}


def first_kernel(code: str) -> str:
    """The source of the first ``@triton.jit`` function in ``code`` (decorator included)."""
    import ast

    for node in ast.parse(code).body:
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            lines = code.splitlines()
            return "\n".join(lines[node.decorator_list[0].lineno - 1:node.end_lineno])
    return code.strip()


# ----------------------------------------------------------------------------- the model
def base_model(path: Path, shape: dict, seed: int, texts: list[str]) -> Path:
    """A random-init Qwen3 of ``shape`` with a BPE tokenizer trained on this package's own
    kernel text plus ``texts`` (the variants)."""
    from rl_step import build_model_dir

    from davinci_kernel.llm.tiny import project_corpus, train_tokenizer

    return build_model_dir(path, shape, seed=seed, tokenizer=train_tokenizer(shape["vocab_size"],
                                                                             project_corpus() + list(texts)))


def sft_config(base: Path, data: Path, epochs: int, lr: float, max_seconds: float = 0.0, max_per_task: int = 64):
    """``dvk train sft``'s config for a curated set (duplicates kept: they are the weights)."""
    import torch

    from davinci_kernel.config import load_config

    bf16 = str(torch.cuda.is_available()).lower()
    return load_config(ROOT / "configs" / "tiny-cpu.yaml", [
        f"sft.model=hf:{base}", f"sft.data=[{data}]", f"sft.epochs={epochs}", f"sft.lr={lr}",
        "sft.max_seq_len=16384", "sft.batch_rows=1", f"sft.bf16={bf16}", "sft.grad_checkpointing=false",
        f"sft.max_per_task={max_per_task}", "sft.dedupe=false", f"sft.max_seconds={max_seconds or 0}"])


def parameters(model_dir: Path) -> int:
    from transformers import AutoModelForCausalLM

    return sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model_dir).parameters())


# ----------------------------------------------------------------------------- files and machine
def read_json(p: Path):
    return json.loads(p.read_text()) if p.is_file() else None


def write_json(p: Path, obj) -> None:
    """Atomically (a reader sees the old file or the new one)."""
    from davinci_kernel.files import write_json as _write

    p.parent.mkdir(parents=True, exist_ok=True)
    _write(p, obj)


def gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def torch_version() -> str:
    import torch

    return torch.__version__


def usage_exit(script: str, msg: str) -> None:
    """Bad input: one line on stderr, exit 2."""
    print(f"{script}: {msg}", file=sys.stderr)
    sys.exit(2)
