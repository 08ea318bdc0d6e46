"""A training progress bar on stderr (rich): done/total steps, elapsed time, an ETA and the
latest numbers, as TRL's trainers show. Stdout stays clean for ``--json``.

Covers: ``bar(total, done, label, enabled)``, a context manager yielding ``update(done, info)``.
On a terminal the bar is live; in a log or pipe it is printed once, when training ends (the
per-step lines the trainers echo carry the progress there). Does not cover: what is trained.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def bar(total: int, done: int = 0, label: str = "train", enabled: bool = True) -> Iterator[Callable[[int, str], None]]:
    if not enabled or total <= 0:
        yield lambda done, info="": None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    cols = (TextColumn(f"[bold]{label}[/]"), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"))
    with Progress(*cols, console=Console(stderr=True), transient=False) as prog:
        task = prog.add_task(label, total=total, completed=done, info="")

        def update(n: int, info: str = "") -> None:
            prog.update(task, completed=n, info=info)

        yield update
