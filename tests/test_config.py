"""Choice fields: declared once in the field metadata, every one checked by ``validate``."""

import dataclasses

import pytest

from davinci_kernel.config import Config, ConfigError, choices_of, load_config, validate


def _choice_fields():
    cfg = Config()
    for section in dataclasses.fields(cfg):
        value = getattr(cfg, section.name)
        if dataclasses.is_dataclass(value):
            for f in dataclasses.fields(value):
                if "choices" in f.metadata:
                    yield section.name, f.name, f.metadata["choices"]


CHOICE_FIELDS = list(_choice_fields())


def test_the_enumerated_fields_declare_their_choices():
    declared = {f"{s}.{n}" for s, n, _ in CHOICE_FIELDS}
    assert {"eval.timing_flush", "eval.timing_lead_from", "eval.sandbox", "skills.select_mode", "rollout.language",
            "reward.kind", "rl.group_by", "rl.mismatch", "rl.micro_batch_layout", "rl.logprob_impl", "rl.env",
            "sft.micro_batch_layout"} <= declared
    assert choices_of(type(Config().eval), "timing_flush") == ("hold", "fill")


@pytest.mark.parametrize("section,name,choices", CHOICE_FIELDS, ids=[f"{s}.{n}" for s, n, _ in CHOICE_FIELDS])
def test_validate_checks_every_choice_field(section, name, choices):
    cfg = Config()
    assert getattr(getattr(cfg, section), name) in choices  # the default is allowed
    for value in choices:
        setattr(getattr(cfg, section), name, value)
        validate(cfg)
    setattr(getattr(cfg, section), name, "bogus")
    with pytest.raises(ConfigError, match=f"{section}.{name}='bogus': allowed values are {', '.join(choices)}"):
        validate(cfg)


def test_overrides_are_checked_against_the_choices():
    assert load_config(None, ["rl.micro_batch_layout=packed"]).rl.micro_batch_layout == "packed"
    with pytest.raises(ConfigError, match="eval.timing_lead_from='faster': allowed values are slower, reference"):
        load_config(None, ["eval.timing_lead_from=faster"])


def test_a_bare_off_is_the_choice_named_off(tmp_path):
    """YAML reads a bare ``off`` as false: a field whose choices include "off" gets "off",
    from an override and from a file alike."""
    from davinci_kernel.config import load_config

    assert load_config(overrides=["rl.mismatch=off"]).rl.mismatch == "off"
    path = tmp_path / "c.yaml"
    path.write_text("rl:\n  mismatch: off\neval:\n  sandbox: off\n")
    cfg = load_config(path)
    assert cfg.rl.mismatch == "off" and cfg.eval.sandbox == "off"


def test_the_seed_library_and_the_top_k_pick_defaults():
    """The seed library: on by default (the inference commands on a fresh machine), off in every
    training recipe (the release starts empty); the rerank asks for the top k unless
    skills.allow_empty_pick."""
    from pathlib import Path

    from davinci_kernel.config import help_table, load_config

    d = load_config(None, []).skills
    assert (d.seed_library, d.allow_empty_pick) == (True, False)
    root = Path(__file__).resolve().parents[1] / "configs"
    for recipe in ("qwen3-8b.yaml", "qwen3-14b.yaml", "tiny-cpu.yaml"):
        s = load_config(root / recipe).skills
        assert (s.seed_library, s.allow_empty_pick) == (False, False), recipe
    helps = {k: h for k, _, h in help_table()}
    assert "the release starts RL with an empty library" in helps["skills.seed_library"]
    assert "dvk optimize" in helps["skills.seed_library"] and "tiny-cpu" in helps["skills.seed_library"]
    assert "top k" in helps["skills.allow_empty_pick"] and "completed in BM25 order" in helps["skills.allow_empty_pick"]
