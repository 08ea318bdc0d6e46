"""Terminal tables that fit the screen: names whole, the least useful columns left out first.

Covers: ``Col`` (a column: its header, how it aligns, whether its values must stay whole, and
its rank, 0 = always shown, higher = left out sooner) and ``print_table``, which measures the
table at the console's width (a terminal's, or ``COLUMNS``, or 80 in a pipe), leaves out
columns by rank until the narrowest layout fits, lets the remaining text columns wrap at
spaces, and says in the caption which columns were left out (``--json`` has every field). A
value that must stay whole (a task or skill name) is never cut with an ellipsis: it is folded
onto a second line only if it is wider than the screen itself. Does not cover: what the
columns hold (the commands that print them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Col:
    header: str
    rank: int = 0  # 0: always shown; among the others the highest is left out first
    justify: str = "left"
    whole: bool = False  # a name: wrapped only by folding, never cut


def _build(cols: Sequence[Col], rows: Sequence[Sequence[Any]], keep: list[int], title: Optional[str],
           caption: Optional[str], width: int):
    from rich import box
    from rich.table import Table

    t = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
              caption_justify="left", title_justify="left")
    cells = [["" if row[i] is None else str(row[i]) for i in keep] for row in rows]
    for j, i in enumerate(keep):
        c = cols[i]
        widest = max([len(c.header)] + [len(r[j]) for r in cells])
        # a name keeps its whole width where the screen allows, else it folds (never cropped)
        t.add_column(c.header, justify=c.justify, overflow="fold", no_wrap=c.whole and widest <= width,
                     min_width=min(widest, width) if c.whole else None)
    for r in cells:
        t.add_row(*r)
    return t


def _render(table, width: int) -> str:
    import io

    from rich.console import Console

    con = Console(width=width, file=io.StringIO(), color_system=None, highlight=False, emoji=False)
    con.print(table)
    return con.file.getvalue()


def fit(cols: Sequence[Col], rows: Sequence[Sequence[Any]], width: int) -> list[int]:
    """Indices of the columns that fit ``width``: with them, every header and every word of
    every cell is printed whole (text columns may wrap between words, never inside one)."""
    keep = list(range(len(cols)))
    droppable = sorted((i for i, c in enumerate(cols) if c.rank > 0), key=lambda i: (cols[i].rank, i))
    while droppable:
        text = _render(_build(cols, rows, keep, None, None, width), width)
        lines = text.splitlines()
        head = lines[0] if lines else ""
        words = {w for row in rows for i in keep for w in str(row[i] if row[i] is not None else "").split()}
        if all(cols[i].header in head for i in keep) and all(w in text for w in words):
            break
        keep.remove(droppable.pop())
    return keep


def print_table(cols: Sequence[Col], rows: Sequence[Sequence[Any]], title: Optional[str] = None,
                caption: Optional[str] = None, console=None) -> None:
    """Print ``rows`` under ``cols`` on ``console`` (stdout by default), fitted to its width."""
    from rich.console import Console

    console = console or Console()
    keep = fit(cols, rows, console.width)
    left_out = [cols[i].header for i in range(len(cols)) if i not in keep]
    notes = [caption] if caption else []
    if left_out:
        notes.append(f"Left out to fit {console.width} columns: {', '.join(left_out)} "
                     "(a wider terminal or --json shows them).")
    console.print(_build(cols, rows, keep, title, "\n".join(notes) or None, console.width))
