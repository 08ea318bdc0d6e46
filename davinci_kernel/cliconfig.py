"""The one configuration surface of the commands that evaluate, sample or train (``eval``,
``bench``, ``run``, ``optimize``, ``train sft``, ``train rl``).

Each takes ``--config FILE`` (YAML: the sections of ``config.Config``) and trailing
``SECTION.KEY=VALUE`` overrides, and its flags are shorthands for config fields
(``dvk bench --device cpu`` is ``dvk bench eval.device=cpu``). Order: the defaults, the
file, the overrides, then the flags given on the command line; a field set both by a flag
and by an override is refused (one line, exit 2) rather than one silently winning. An
override of a section the command does not read (``dvk bench rl.lr=1``) is refused too.
Values are checked by ``config`` (types without truncation, declared choices, ranges).

Covers: ``command_config``, the shared help texts, and ``check_resume`` (a ``--resume``
whose config changes results is refused, naming each difference, unless every one is let
through with ``--allow-config-change FIELD``). Does not cover: the fields (``config``).
"""

from __future__ import annotations

from typing import Any, Optional

from .config import Config, ConfigError, flatten, load_config, parse_overrides, refuse_changes

CONFIG_HELP = ("YAML config file (sections eval, skills, rollout, reward, rl, sft; see configs/README.md); "
               "SECTION.KEY=VALUE overrides and the flags win over it")
OVERRIDES_HELP = "config overrides SECTION.KEY=VALUE, e.g. eval.sandbox=require (the flags are shorthands for these)"
ALLOW_HELP = ("with --resume: accept this config field's change from the run's saved config (repeat for several; "
              "fields that change no results, e.g. where files go, never need it)")

RERUN_ALLOW_HELP = ("when --out holds an earlier run of this command: accept this config field's change from the "
                    "config that run recorded (repeat for several; fields that change no results never need it)")

Flag = tuple[tuple[str, ...], Any]  # (config fields the flag sets, its value)


def _given(ctx: Any, name: str) -> bool:
    """Whether parameter ``name`` was given on the command line (or its environment variable)."""
    get = getattr(ctx, "get_parameter_source", None)
    src = get(name) if get is not None else None
    return src is not None and getattr(src, "name", "") in ("COMMANDLINE", "ENVIRONMENT")


def command_config(ctx: Any, config_file: Optional[str], overrides: Optional[list[str]],
                   flags: dict[str, Flag], sections: tuple[str, ...], command: str) -> Config:
    """The validated config of one command: defaults < ``config_file`` < ``overrides`` < the
    ``flags`` given on the command line (``{param name: (fields, value)}``)."""
    overrides = list(overrides or [])
    over = flatten(parse_overrides(overrides))
    for key in over:
        section = key.split(".", 1)[0]
        if "." in key and section not in sections:
            raise ConfigError(f"{key}: dvk {command} reads only the {', '.join(sections)} section"
                              f"{'s' if len(sections) > 1 else ''} of the config")
    values: dict[str, Any] = {}
    for name, (fields, value) in flags.items():
        if not _given(ctx, name):
            continue
        flag = "--" + name.replace("_", "-")
        for field in fields:
            if field in over:
                raise ConfigError(f"{field} is given twice, by {flag} and by {field}={over[field]!r}: give one")
            values[field] = value
    return load_config(config_file, overrides, values)


def check_resume(saved: dict, cfg: Config, allow: Optional[list[str]], where: str,
                 ignore: tuple = ()) -> list[str]:
    """Refuse (``ConfigError``) a ``--resume`` whose ``cfg`` changes results against the ``saved``
    config (``config.to_dict`` of the run's), unless each change is in ``allow``. Returns the
    allowed changes (for a note)."""
    import dataclasses

    return refuse_changes(saved, dataclasses.asdict(cfg), tuple(allow or ()), where, ignore, prefix="--resume: ")
