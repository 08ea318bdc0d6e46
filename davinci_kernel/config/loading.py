"""Loading a configuration: YAML plus dotted ``key=value`` overrides, coerced to each
field's type and checked against its declared choices, with errors that name the field,
the value and what is allowed; comparing a run's saved config with a new one.

Covers: ``load_config``, ``validate``, ``parse_overrides``, ``choices_of``, ``flatten``/``nest``,
``result_changes``/``refuse_changes`` (which changes alter a run's results), ``to_dict``,
``help_table`` (the generated reference) and ``rollout_sections``. Does not cover: the
fields themselves (``sections.py``).
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any, Optional

from ..errors import UsageError
from .sections import Config, ConfigError, EvalConfig, RewardConfig, RolloutConfig, SkillsConfig


def _coerce(value: Any, typ: Any, where: str) -> Any:
    if isinstance(typ, str) and typ.startswith("Optional[") and typ.endswith("]"):
        if value is None or (isinstance(value, str) and value.lower() in ("null", "none", "")):
            return None
        return _coerce(value, typ[len("Optional["):-1], where)
    origin = typing.get_origin(typ)
    if typ is bool or typ == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return value.lower() in ("true", "1", "yes", "on")
        raise ConfigError(f"{where}={value!r}: expected true or false")
    if typ in (int, "int"):
        if isinstance(value, float) and value.is_integer():
            return int(value)  # 3.0 is 3; 2.5 is refused below, never truncated
        if isinstance(value, str):
            try:
                return int(value.strip().replace("_", ""), 10)
            except ValueError:
                pass
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}={value!r}: expected an integer")
    if typ in (float, "float"):
        if isinstance(value, bool) or isinstance(value, (list, dict)) or value is None:
            raise ConfigError(f"{where}={value!r}: expected a number")
        try:
            out = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}={value!r}: expected a number") from None
        if out != out or out in (float("inf"), float("-inf")):
            raise ConfigError(f"{where}={value!r}: expected a finite number")
        return out
    if typ in (str, "str"):
        if isinstance(value, (list, dict)) or value is None:
            raise ConfigError(f"{where}={value!r}: expected text")
        return str(value)
    if typ in (list, "list") or origin is list:
        if isinstance(value, str):
            import yaml

            value = yaml.safe_load(value)
        if not isinstance(value, list):
            raise ConfigError(f"{where}={value!r}: expected a list")
        return value
    return value


def _unknown_key(obj: Any, key: str, prefix: str) -> str:
    """The message for an unknown key: the closest known one ("did you mean"), else every
    key of that section; a key of another section (``lr`` for ``rl.lr``) is named too."""
    import difflib

    fields = sorted(f.name for f in dataclasses.fields(obj))
    close = difflib.get_close_matches(str(key), fields, n=1, cutoff=0.6)
    if close:
        return f"unknown config key '{prefix}{key}': did you mean '{prefix}{close[0]}'?"
    elsewhere = [f"{f.name}.{key}" for f in dataclasses.fields(obj) if dataclasses.is_dataclass(getattr(obj, f.name))
                 and key in {g.name for g in dataclasses.fields(getattr(obj, f.name))}]
    if elsewhere:
        return f"unknown config key '{prefix}{key}': did you mean '{prefix}{elsewhere[0]}'?"
    return f"unknown config key '{prefix}{key}' (known: {', '.join(fields)})"


def _apply(obj: Any, data: dict, prefix: str = "") -> None:
    fields = {f.name: f for f in dataclasses.fields(obj)}
    for key, value in data.items():
        where = f"{prefix}{key}"
        if key not in fields:
            raise ConfigError(_unknown_key(obj, key, prefix))
        f = fields[key]
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"'{where}' is a section; give its keys, e.g. {where}.<key>=...")
            _apply(current, value, where + ".")
            continue
        choices = f.metadata.get("choices") or ()
        if isinstance(value, bool) and choices:  # YAML reads a bare off/no/on/yes as a boolean
            words = ("off", "no", "false", "none") if not value else ("on", "yes", "true")
            value = next((c for c in choices if c in words), value)
        setattr(obj, key, _coerce(value, f.type, where))  # choices: checked by validate()


def choices_of(cls: type, name: str) -> tuple:
    """The allowed values of field ``name`` of config class ``cls`` (its ``choices`` metadata)."""
    return {f.name: f for f in dataclasses.fields(cls)}[name].metadata["choices"]


def _check_choices(obj: Any, prefix: str = "") -> None:
    """Every field with ``choices`` metadata, in ``obj`` and its sections, holds one of them."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            _check_choices(value, f"{prefix}{f.name}.")
        elif "choices" in f.metadata and value not in f.metadata["choices"]:
            allowed = ", ".join(map(str, f.metadata["choices"]))
            raise ConfigError(f"{prefix}{f.name}={value!r}: allowed values are {allowed}")


def validate(cfg: Config) -> Config:
    """Every choice field against its declared ``choices``, then range checks that types
    cannot express."""
    _check_choices(cfg)
    checks = [
        ("eval.trials", cfg.eval.trials >= 1, "at least 1"),
        ("eval.atol", cfg.eval.atol >= 0, "non-negative"),
        ("eval.compile_timeout_s", cfg.eval.compile_timeout_s > 0, "more than 0 seconds"),
        ("eval.run_timeout_s", cfg.eval.run_timeout_s > 0, "more than 0 seconds"),
        ("eval.rtol", cfg.eval.rtol >= 0, "non-negative"),
        ("eval.timing_iters", cfg.eval.timing_iters >= 3, "at least 3"),
        ("eval.timing_max_iters", cfg.eval.timing_max_iters >= cfg.eval.timing_iters, "at least eval.timing_iters"),
        ("eval.timing_budget_s", cfg.eval.timing_budget_s >= 0, "0 or more seconds"),
        ("eval.timing_placements", cfg.eval.timing_placements >= 1, "at least 1"),
        ("eval.timing_ci_target", 0 <= cfg.eval.timing_ci_target < 1, "a relative half-width in [0, 1) (0 = off)"),
        ("eval.timing_ci_budget_s", 0 <= cfg.eval.timing_ci_budget_s < cfg.eval.run_timeout_s,
         "0 or more seconds, less than eval.run_timeout_s"),
        ("eval.workers_per_gpu", 1 <= cfg.eval.workers_per_gpu <= 16, "1 to 16"),
        ("eval.timing_lead_us", cfg.eval.timing_lead_us == -1 or 0 <= cfg.eval.timing_lead_us <= 10000,
         "0 to 10000 microseconds, or -1 (auto)"),
        ("eval.timing_warmup_ms", 0 <= cfg.eval.timing_warmup_ms <= 60000, "0 to 60000 milliseconds"),
        ("rollout.turns", cfg.rollout.turns >= 1, "at least 1"),
        ("rollout.k_schemes", cfg.rollout.k_schemes >= 0, "non-negative"),
        ("rollout.n_rollouts", cfg.rollout.n_rollouts >= 1, "at least 1"),
        ("rollout.s_summaries", cfg.rollout.s_summaries >= 1, "at least 1"),
        ("rollout.max_new_tokens", cfg.rollout.max_new_tokens >= 1, "at least 1"),
        *((f"rollout.max_new_tokens_{role}", getattr(cfg.rollout, f"max_new_tokens_{role}") >= 0,
           "0 (use rollout.max_new_tokens) or more") for role in ("selection", "summary", "policy")),
        ("rollout.temperature", cfg.rollout.temperature >= 0, "0 or more"),
        ("rollout.top_p", 0 < cfg.rollout.top_p <= 1, "in (0, 1]"),
        ("skills.max_selected", 0 <= cfg.skills.max_selected <= 20, "between 0 and 20"),
        ("rl.lr", cfg.rl.lr >= 0, "0 or more (0: a control run that samples and scores but never moves the weights)"),
        ("rl.batch_tasks", cfg.rl.batch_tasks >= 1, "at least 1"),
        ("rollout.gen_batch", cfg.rollout.gen_batch >= 1, "at least 1"),
        ("rl.gamma", 0 <= cfg.rl.gamma <= 1, "between 0 and 1"),
        ("rl.loss_scale", cfg.rl.loss_scale > 0, "more than 0"),
        ("rl.dynamic_oversample", cfg.rl.dynamic_oversample >= 1, "at least 1 (1: no task sampled beyond the batch)"),
        ("rl.dynamic_max_factor", cfg.rl.dynamic_max_factor >= 0, "0 (no further rounds) or more"),
        ("sft.epochs", cfg.sft.epochs >= 1, "at least 1"),
        ("sft.max_seconds", cfg.sft.max_seconds >= 0, "0 (no limit) or more"),
        ("rl.steps", cfg.rl.steps >= 1, "at least 1"),
        ("rl.minibatches", cfg.rl.minibatches >= 1, "at least 1"),
        ("rl.micro_batch_tokens", cfg.rl.micro_batch_tokens >= 16, "at least 16"),
        ("rl.lora_r", cfg.rl.lora_r >= 0, "non-negative"),
        ("rl.generator_timeout_s", cfg.rl.generator_timeout_s > 0, "more than 0 seconds"),
        ("rl.fsdp", not (cfg.rl.fsdp and cfg.rl.generator != "local"),
         "false with a generation server (syncing a sharded model is not built yet)"),
        ("rl.fsdp", not (cfg.rl.fsdp and cfg.rl.lora_r > 0), "false with rl.lora_r > 0 (adapters are small: "
                                                             "replicate them with DDP)"),
        ("rl.fsdp", not (cfg.rl.fsdp and cfg.rl.logprob_impl == "fused"),
         "false with rl.logprob_impl=fused (the fused path reads the head's weight outside the forward)"),
        ("rl.clip_low", 0 <= cfg.rl.clip_low < 1, "in [0, 1)"),
        ("rl.clip_high", cfg.rl.clip_high >= 0, "non-negative"),
        ("rl.save_every", cfg.rl.save_every >= 1, "at least 1"),
        ("rl.keep_checkpoints", cfg.rl.keep_checkpoints >= 1, "at least 1"),
        ("sft.max_seq_len", cfg.sft.max_seq_len >= 16, "at least 16"),
        ("sft.minhash_threshold", 0 < cfg.sft.minhash_threshold <= 1, "in (0, 1]"),
    ]
    for name, ok, allowed in checks:
        if not ok:
            section, key = name.split(".")
            raise ConfigError(f"{name}={getattr(getattr(cfg, section), key)!r}: must be {allowed}")
    return cfg


def parse_overrides(overrides: list[str]) -> dict:
    """``["rl.lr=1e-5", "eval.trials=3"]`` → nested dict (values parsed as YAML scalars)."""
    import yaml

    out: dict = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like section.key=value")
        key, raw = item.split("=", 1)
        if not key.strip() or any(not part for part in key.strip().split(".")):
            raise ConfigError(f"override '{item}' must look like section.key=value")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def yaml_where(e: Exception) -> str:
    """``LINE:COLUMN:`` (1-based) of a YAML error, or '' when it has no position."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    return f"{mark.line + 1}:{mark.column + 1}:" if mark is not None else ""


def yaml_problem(e: Exception) -> str:
    what = ", ".join(x for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x)
    return what or str(e).splitlines()[0]


def nest(values: dict) -> dict:
    """``{"eval.trials": 3}`` → ``{"eval": {"trials": 3}}``."""
    out: dict = {}
    for key, value in values.items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def flatten(data: dict, prefix: str = "") -> dict:
    """``{"eval": {"trials": 3}}`` → ``{"eval.trials": 3}``."""
    out: dict = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def result_fields(cls: type = Config, prefix: str = "") -> set[str]:
    """Dotted names of the fields that change a run's results (all but ``results=False`` ones)."""
    out: set[str] = set()
    inst = cls()
    for f in dataclasses.fields(cls):
        value = getattr(inst, f.name)
        if dataclasses.is_dataclass(value):
            out |= result_fields(type(value), f"{prefix}{f.name}.")
        elif f.metadata.get("results", True):
            out.add(prefix + f.name)
    return out


def _model_id(value: Any) -> Any:
    """A model spec as far as results go: ``openai:URL#MODEL`` is its MODEL (a server moved to
    another URL serves the same model)."""
    if isinstance(value, str) and value.startswith("openai:") and "#" in value:
        return "openai:" + value.rsplit("#", 1)[1]
    return value


def result_changes(old: dict, new: dict, allow: tuple = (), ignore: tuple = ()) -> list[str]:
    """``field: old → new`` for each field of two saved configs (``to_dict``) that changes results;
    fields in ``allow`` or ``ignore`` are let through. Unknown ``allow`` names are ``ConfigError``."""
    known = result_fields()
    for name in allow:
        if name not in known:
            import difflib

            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"--allow-config-change {name}: not a config field that changes results{hint}")
    a, b = flatten(old), flatten(new)
    out = []
    for key in sorted(known - set(allow) - set(ignore)):
        if key in a and key in b and _model_id(a[key]) != _model_id(b[key]):
            out.append(f"{key}: {a[key]!r} → {b[key]!r}")
    return out


def refuse_changes(old: dict, new: dict, allow: tuple = (), where: str = "the run", ignore: tuple = (),
                   prefix: str = "") -> list[str]:
    """``ConfigError`` naming every field in which config ``new`` changes the results of the run
    made with ``old`` (both ``to_dict`` form, or some of their sections), unless each is in
    ``allow``. Returns the changes ``allow`` let through."""
    changes = result_changes(old, new, tuple(allow), ignore)
    if changes:
        flags = " ".join(f"--allow-config-change {c.split(':', 1)[0]}" for c in changes)
        raise ConfigError(f"{prefix}{where} was made with another config ({'; '.join(changes)}): use the run's "
                          f"values, choose another --out, or accept the change with {flags}")
    return [c for c in result_changes(old, new, (), ignore) if c.split(":", 1)[0] in set(allow)]


def load_config(path: Optional[str | Path] = None, overrides: Optional[list[str]] = None,
                values: Optional[dict] = None) -> Config:
    """Defaults, then the YAML file, then dotted overrides, then ``values`` (dotted name → value:
    what a command's flags set); validated."""
    import yaml

    from ..errors import read_text_file

    cfg = Config()
    if path is not None:
        p = Path(path)
        try:
            text = read_text_file(p, "config file")
        except UsageError as e:
            raise ConfigError(str(e)) from None
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}:{yaml_where(e)} not valid YAML ({yaml_problem(e)})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: expected a mapping of sections")
        _apply(cfg, data)
    if overrides:
        _apply(cfg, parse_overrides(overrides))
    if values:
        _apply(cfg, nest(values))
    return validate(cfg)


def rollout_sections(eval_cfg: EvalConfig, rollout: RolloutConfig, reward: RewardConfig,
                     skills: SkillsConfig, select: str, seed_library: bool) -> dict:
    """The config sections a rollout command (``dvk optimize``, ``dvk run``) reads, as its
    run.json records them: a rerun into the same folder is checked against them."""
    return {"eval": dataclasses.asdict(eval_cfg), "rollout": dataclasses.asdict(rollout),
            "reward": dataclasses.asdict(reward),
            "skills": {**dataclasses.asdict(skills), "select_mode": select, "seed_library": seed_library}}


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


def help_table(cls: type = Config, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, default, help) for every field, for `--help` style listings."""
    rows = []
    inst = cls()
    for f in dataclasses.fields(cls):
        value = getattr(inst, f.name)
        if dataclasses.is_dataclass(value):
            rows += help_table(type(value), prefix + f.name + ".")
        else:
            rows.append((prefix + f.name, repr(value), f.metadata.get("help", "")))
    return rows
