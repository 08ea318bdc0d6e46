"""Tasks by name: the one spelling of a task that every command taking a problem accepts.

Covers: ``load_task(spec)`` for a problem given as a file path, ``builtin:level1/3_Softmax``,
``kernelbench:DIR:level1/19_ReLU`` or ``hf:NAME_OR_PATH:level1/19_ReLU`` (a ``.py`` ending is
optional; a name without its ``levelN/`` is accepted when only one level has it), or a bare
built-in name (``level1/3_Softmax``) when no such file exists; and ``task_spec(suite, task)``,
the name ``dvk tasks list`` prints for a task so that it can be given back as it is; and
``pick_tasks``, the tasks of a suite that ``--tasks`` patterns name (``dvk bench``, ``dvk run``).
Does not cover: reading suites (``loader``).
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Optional

from ..records import Task
from .loader import BUILTIN_DIR, SuiteError, load_dir, load_hf, load_task_file

_PREFIXES = ("builtin:", "kernelbench:", "hf:")
HINT = "name a task like builtin:level1/3_Softmax or kernelbench:DIR:level1/19_ReLU (dvk tasks list shows the names)"


def pick_tasks(tasks: list, patterns: Optional[str]) -> list:
    """The tasks whose name (``level2/77_Name``) matches one of the comma-separated
    shell-style patterns (``level2/77_*,*ReLU*``); all of them without patterns. A pattern
    that matches no task is bad input."""
    from ..errors import UsageError

    if not patterns:
        return tasks
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    if not pats:
        raise UsageError(f"--tasks {patterns!r}: give task-name patterns, e.g. 'level1/19_*,*Softmax*'")
    for pat in pats:
        if not any(fnmatch.fnmatchcase(t.name, pat) for t in tasks):
            raise UsageError(f"--tasks pattern {pat!r} matches no task (names look like {tasks[0].name!r})")
    return [t for t in tasks if any(fnmatch.fnmatchcase(t.name, pat) for pat in pats)]


def task_spec(suite: str, task: Task) -> str:
    """The loadable name of ``task`` of suite ``suite`` (as the user spelled the suite)."""
    if suite == "builtin":
        return f"builtin:{task.name}"
    if suite.startswith(("kernelbench:", "hf:")):
        return f"{suite}:{task.name}"
    return f"kernelbench:{suite}:{task.name}"  # a plain folder given as the suite


def _pick(tasks: list[Task], name: str, suite: str) -> Task:
    name = name.strip().removesuffix(".py").strip("/")
    if not name:
        raise SuiteError(f"{suite}: no task named; {HINT}")
    exact = [t for t in tasks if t.name == name]
    if exact:
        return exact[0]
    tail = [t for t in tasks if t.name.rsplit("/", 1)[-1] == name]
    if len(tail) == 1:
        return tail[0]
    if len(tail) > 1:
        raise SuiteError(f"{suite}: task {name!r} is ambiguous: {', '.join(t.name for t in tail)}; add its level")
    near = [t.name for t in tasks if name.lower() in t.name.lower()][:5]
    also = f" (did you mean {', '.join(near)}?)" if near else ""
    raise SuiteError(f"{suite} has no task {name!r}{also}; dvk tasks list --suite {suite} shows the names")


def _builtin(name: str) -> Task:
    return _pick(load_dir(BUILTIN_DIR, suite="builtin"), name, "builtin")


def load_task(spec: str | Path) -> Task:
    """A problem by file path or by name (see the module docstring); bad names are ``SuiteError``
    (a ``UsageError``: exit 2) saying how to name one."""
    text = str(spec)
    p = Path(text).expanduser()
    if p.is_file() or p.is_dir():
        return load_task_file(p)  # a folder: refused there, in one line
    if text.startswith("builtin:"):
        return _builtin(text[len("builtin:"):])
    if text.startswith(("kernelbench:", "hf:")):
        kind, rest = text.split(":", 1)
        if ":" not in rest:
            raise SuiteError(f"{text}: give the suite and the task, e.g. {kind}:{rest or 'DIR'}:level1/19_ReLU")
        where, name = rest.rsplit(":", 1)
        tasks = load_dir(where, suite=f"kernelbench:{where}") if kind == "kernelbench" else load_hf(where)
        return _pick(tasks, name, f"{kind}:{where}")
    if not text.endswith(".py") or "/" in text:
        try:
            return _builtin(text)
        except SuiteError as e:
            if "did you mean" in str(e):
                raise SuiteError(f"problem file not found: {text}; {e}") from None
    raise SuiteError(f"problem file not found: {text} (or {HINT})")
