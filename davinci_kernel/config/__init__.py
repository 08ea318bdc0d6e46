"""Typed configuration for every stage, loaded from YAML plus dotted overrides.

Covers: one dataclass per stage (fields carry ``help`` and, where the value is a
choice, ``choices`` metadata: the one declaration of what is allowed, read by
``choices_of`` and checked for every such field by ``validate``),
``load_config(path, overrides)`` and validation that names the field, the value and
what is allowed. Does not cover: reading the model
or tasks those values point at; that happens in the stage that uses them.
"""

from .loading import (
    choices_of,
    flatten,
    help_table,
    load_config,
    nest,
    parse_overrides,
    refuse_changes,
    result_changes,
    result_fields,
    rollout_sections,
    to_dict,
    validate,
    yaml_problem,
    yaml_where,
)
from .sections import (
    Config,
    ConfigError,
    EvalConfig,
    RewardConfig,
    RLConfig,
    RolloutConfig,
    SFTConfig,
    SkillsConfig,
    opt,
)

__all__ = ["Config", "ConfigError", "EvalConfig", "RLConfig", "RewardConfig", "RolloutConfig", "SFTConfig",
           "SkillsConfig", "choices_of", "flatten", "help_table", "load_config", "nest", "opt", "parse_overrides",
           "refuse_changes", "result_changes", "result_fields", "rollout_sections", "to_dict", "validate",
           "yaml_problem", "yaml_where"]
