"""Live progress of a rollout run with rich, on stderr so stdout stays clean.

Covers: one bar for tasks (or turns, for a single task) plus running counts of model
calls and evaluations, fed by ``Context.progress`` events. Falls back to nothing when
stderr is not a terminal. Does not cover: the final tables (the commands print those).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def live(total: int, unit: str, title: str) -> Iterator[Callable[[str, int], None]]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    counts = {"generated": 0, "evaluated": 0}
    if not console.is_terminal:
        yield lambda event, n=1: None
        return
    cols = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[calls]}"), TimeElapsedColumn())
    with Progress(*cols, console=console, transient=False) as prog:
        bar = prog.add_task(title, total=total, calls="")

        def on_event(event: str, n: int = 1) -> None:
            if event in counts:
                counts[event] += n
            advance = n if event == unit else 0
            prog.update(bar, advance=advance,
                        calls=f"{counts['generated']} model calls, {counts['evaluated']} evaluations")

        yield on_event
