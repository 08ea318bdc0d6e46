"""Readable ``--help`` for every ``dvk`` command: placeholders people know, ``-h`` as ``--help``.

Covers: one pass over the command tree (``tidy``) that gives arguments upper-case names
(``dvk eval PROBLEM CANDIDATE``, ``dvk report RUN_DIR...``) instead of ``{problem}`` and a
type column, and options the classic value names (``TEXT``, ``INTEGER``, ``FLOAT``, ``PATH``,
``a|b`` for a choice; a repeatable option reads ``TEXT ...``) instead of ``<str>`` or
``<list[str]>``. ``HELP_OPTIONS`` is what the root app's ``context_settings`` uses, so every
command answers ``-h`` as it does ``--help``. Does not cover: the commands themselves or
their help text (each package's ``commands`` module).
"""

from __future__ import annotations

import re
from typing import Any, Optional

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}

_NAMES = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "path": "PATH", "file": "FILE",
          "directory": "DIR", "bool": ""}


def value_name(shown: Optional[str]) -> Optional[str]:
    """``<str>`` → ``TEXT``, ``<list[int]>`` → ``INTEGER ...``, ``<a|b>`` stays ``a|b``; None
    and placeholders already readable pass through."""
    if not shown:
        return shown
    m = re.fullmatch(r"<(.*)>(\.\.\.)?", shown.strip())
    if not m:
        return shown
    inner, many = m.group(1), bool(m.group(2))
    lm = re.fullmatch(r"list\[(.*)\]", inner)
    if lm:
        inner, many = lm.group(1), True
    name = _NAMES.get(inner.lower(), inner if "|" in inner else inner.upper())
    return f"{name} ..." if many and name else name


def _tidy_argument(p: Any) -> None:
    base = (p.metavar or p.name or "ARG").upper().removesuffix("...")
    many = getattr(p, "nargs", 1) != 1
    p.metavar = base + ("..." if many else "")

    def usage(p=p) -> str:
        return p.metavar if p.required else f"[{p.metavar}]"

    p._usage_display_name = usage
    p.display_type_rich = lambda ctx: None  # the name says it; no second type column


def _tidy_option(p: Any) -> None:
    if getattr(p, "is_flag", False) or p.metavar is not None:
        return
    orig = getattr(p, "display_type_rich", None)
    if orig is None:
        return

    def shown(ctx, _orig=orig) -> Optional[str]:
        return value_name(_orig(ctx))

    p.display_type_rich = shown


def tidy(cmd: Any) -> Any:
    """Apply the placeholders to ``cmd`` and every sub-command; return ``cmd``."""
    for p in getattr(cmd, "params", ()):
        kind = getattr(p, "param_type_name", "")
        if kind == "argument":
            _tidy_argument(p)
        elif kind == "option":
            _tidy_option(p)
    for sub in getattr(cmd, "commands", {}).values():
        tidy(sub)
    return cmd
