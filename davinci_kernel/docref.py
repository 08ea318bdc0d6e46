"""Reference pages generated from the code, so they are never written twice by hand.

Covers: ``cli_markdown()`` — every ``dvk`` command, walked from the typer app as ``dvk``
builds it (usage line, description, arguments and options with their value names, defaults
and help) — and ``config_markdown()`` — every field of the configuration dataclasses
(``config.Config`` and its sections: key, type, default, allowed values, help with its
[P]/[R]/[O] source tag). The docs build (``docs/_hooks/reference.py``) turns them into
``reference/cli.md`` and ``reference/config.md`` at build time; ``python -m
davinci_kernel.docref cli|config`` prints one. Does not cover: the hand-written guides.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
import typing
from typing import Any, Optional

PAGES = ("reference/cli.md", "reference/config.md")

_CLI_INTRO = """# Command-line reference

Generated from the `dvk` command tree at docs build time: every command, argument and option,
with its default. `-h` works as `--help` everywhere. Exit codes: 0 done (a wrong kernel is a
result), 2 bad usage or input (one line on stderr), 1 our own failure, 130 interrupted.
Conventions shared by the commands are in [the command line](../cli.md).
"""

_CONFIG_INTRO = """# Configuration reference

Generated from the configuration dataclasses in `davinci_kernel/config/sections.py` at docs build
time. A YAML recipe (`--config FILE`, see `configs/`) sets any of these keys by section;
`section.key=value` overrides on the command line set one. A tag at the start of a help text
says where a method value comes from: **[P]** the paper's text, **[R]** the public release's
code and configs, **[O]** our own choice; untagged fields are engineering settings.
"""


def _cell(text: Any) -> str:
    """Text safe inside a Markdown table cell."""
    s = " ".join(str(text).split())
    return s.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _code(text: Any) -> str:
    s = " ".join(str(text).split()).replace("|", "\\|")
    return f"`{s}`" if s else ""


# --------------------------------------------------------------------------- the CLI
def _root_command():
    from . import cli

    cli._register_all()
    return cli._command()


def _default(p: Any) -> str:
    if getattr(p, "required", False):
        return "required"
    d = getattr(p, "default", None)
    if callable(d) or d is None or d == () or d == []:
        return ""
    if getattr(p, "is_flag", False):
        if getattr(p, "secondary_opts", None):
            return _code(p.opts[0] if d else p.secondary_opts[0])
        return "" if d is False else "on"
    return _code(d)


def _param_row(p: Any, ctx: Any) -> str:
    if p.param_type_name == "argument":
        name = _code(p.metavar or p.name.upper())
        value = ""
    else:
        names = sorted(p.opts, key=lambda o: (o.startswith("--"), o)) + list(p.secondary_opts)
        name = ", ".join(_code(o) for o in names)  # short names first, in a stable order
        shown = p.display_type_rich(ctx) if hasattr(p, "display_type_rich") else None
        value = "" if getattr(p, "is_flag", False) else _code(shown or p.metavar or "")
    return f"| {name} | {value} | {_default(p)} | {_cell(p.help or '')} |"


def _usage(cmd: Any, ctx: Any) -> str:
    pieces = cmd.collect_usage_pieces(ctx)
    return " ".join([ctx.command_path, *pieces])


def _commands(cmd: Any, ctx: Any, out: list[str]) -> None:
    subs = getattr(cmd, "commands", None)
    out.append(f"\n## {ctx.command_path}\n")
    out.append(f"```text\n{_usage(cmd, ctx)}\n```\n")
    if cmd.help:
        out.append(inspect.cleandoc(cmd.help).replace("\b\n", "") + "\n")
    params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False)]
    if params:
        out.append("| argument / option | value | default | meaning |")
        out.append("|---|---|---|---|")
        out += [_param_row(p, ctx) for p in params]
    for name in sorted(subs or {}):
        sub = subs[name]
        if getattr(sub, "hidden", False):
            continue
        _commands(sub, sub.context_class(sub, info_name=name, parent=ctx, **(sub.context_settings or {})), out)


def cli_markdown() -> str:
    """The CLI reference page (Markdown)."""
    root = _root_command()
    ctx = root.context_class(root, info_name="dvk", **(root.context_settings or {}))
    out = [_CLI_INTRO, "## Commands\n"]
    out += [f"- [`dvk {name}`](#dvk-{name}){': ' + _cell(sub.get_short_help_str(80)) if sub.help else ''}"
            for name, sub in sorted(root.commands.items()) if not getattr(sub, "hidden", False)]
    _commands(root, ctx, out)
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------- the configuration
def _type_name(t: Any) -> str:
    if isinstance(t, str):
        return t
    origin = typing.get_origin(t)
    if origin is typing.Union:
        args = [a for a in typing.get_args(t) if a is not type(None)]
        return " \\| ".join(_type_name(a) for a in args) + (" or null" if len(args) < len(typing.get_args(t)) else "")
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(t))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(t, "__name__", str(t))


def _sections(cls: type, prefix: str = "") -> list[tuple[str, type, list]]:
    """(section name, dataclass, [(key, field, resolved type, default)]) per dataclass."""
    hints = typing.get_type_hints(cls)
    inst = cls()
    rows, subs = [], []
    for f in dataclasses.fields(cls):
        value = getattr(inst, f.name)
        if dataclasses.is_dataclass(value):
            subs += _sections(type(value), prefix + f.name + ".")
        else:
            rows.append((prefix + f.name, f, hints.get(f.name, f.type), value))
    return subs + ([(prefix.rstrip(".") or "top level", cls, rows)] if rows else [])


def config_markdown() -> str:
    """The configuration reference page (Markdown)."""
    from .config import Config

    out = [_CONFIG_INTRO]
    sections = _sections(Config)
    out.append("Sections: " + ", ".join(f"[`{name}`](#{_anchor(name)})" for name, _, _ in sections) + ".\n")
    for name, cls, rows in sections:
        out.append(f"\n## {name}\n")
        doc = inspect.getdoc(cls) or ""
        if doc and not doc.startswith(f"{cls.__name__}("):
            out.append(doc + "\n")
        out.append("| key | type | default | meaning |")
        out.append("|---|---|---|---|")
        for key, f, typ, default in rows:
            choices = f.metadata.get("choices")
            help_ = f.metadata.get("help", "")
            if choices:
                help_ += " (one of: " + ", ".join(map(str, choices)) + ")"
            out.append(f"| `{key}` | {_cell(_type_name(typ))} | {_code(_yaml(default))} | {_cell(help_)} |")
    return "\n".join(out).rstrip() + "\n"


def _yaml(value: Any) -> str:
    """A default as it is written in a YAML recipe."""
    import json

    if isinstance(value, str):
        return value if value else '""'
    return json.dumps(value)


def _anchor(title: str) -> str:
    """The id MkDocs gives a heading (lower case, runs of other characters to one ``-``)."""
    import re

    return re.sub(r"[^\w]+", "-", title.lower()).strip("-")


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    pages = {"cli": cli_markdown, "config": config_markdown}
    if len(args) != 1 or args[0] not in pages:
        print("usage: python -m davinci_kernel.docref cli|config", file=sys.stderr)
        return 2
    sys.stdout.write(pages[args[0]]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
