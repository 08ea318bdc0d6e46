"""`dvk skills list|search|show|add|import|export` — thin wrappers over the store.

Covers: parsing the options, calling one store/index function, printing a rich
table (people) or one JSON document (``--json``). The read-only commands (list, search, show,
export) never create a library: where none is, they read what a new one would start with, from
memory, and a note on stderr says nothing was created. ``add`` and ``import`` create a new
library at ``--db`` (a note on stderr says so), seeded with the bundled skills (``--no-seed``, on
every command, to start empty); a ``--db`` that is not a skill library is refused. Export
creates missing parent folders of its file. Bad input raises
UsageError (one line, exit 2); a malformed JSONL line in ``import`` is a warning
on stderr, and the command still exits 0 with the good lines imported.

Does not cover: selection or admission during training (``select``, ``admit``).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from ..config import SkillsConfig
from ..errors import UsageError, check_out_file, read_text_file
from ..files import print_json

DEFAULT_DB = SkillsConfig().db
_DB_HELP = (f"SQLite skill library (default: {DEFAULT_DB}); a new one is created, with missing parent "
            "folders, and seeded with the 23 bundled skills unless --no-seed; a file that is not a skill "
            "library is refused")
_SEED_HELP = "seed a new library with the bundled skills (--no-seed: start it empty, e.g. before an import)"
_SPEEDUP_NOTE = ("speedup: the skill's own example kernel vs eager PyTorch where it was verified (seed skills: "
                 "measured on an H200, bench/results/skills_speedup.json). Seed examples teach a technique on a "
                 "small case; several are slower than eager (0.10x-0.5x), and that is not the speedup the "
                 "technique gives a real kernel.")


@contextmanager
def _open(db: Optional[str], seed: bool = True, write: bool = True):
    """The library at ``db``; when it was created now, a note on stderr says so once the
    command succeeded (an error stays one line). ``write=False`` (list, search, show, export):
    a library that is not there is never created; the command reads what a new one would
    start with (the bundled skills, or none with --no-seed) from memory, and says so."""
    from .store import open_store

    cfg = SkillsConfig()
    if db:
        cfg.db = db
    cfg.seed_library = seed
    path = Path(cfg.db).expanduser()
    new = not path.exists() or path.stat().st_size == 0
    if new and not write:
        cfg.db = ":memory:"
        with open_store(cfg) as store:
            n = len(store)
            yield store
        what = f"the {n} bundled skills a new one starts with" if n else "nothing (a new one starts empty)"
        typer.echo(f"note: no skill library at {path} (nothing was created): showing {what}", err=True)
        return
    with open_store(cfg) as store:
        n_seeded = len(store) if new else 0
        yield store
    if new:
        how = f"seeded with {n_seeded} bundled skills" if n_seeded else "empty"
        typer.echo(f"note: created a new skill library at {path} ({how})", err=True)


def _table(skills, scores=None, title: str = ""):
    from ..tables import Col, print_table

    cols = ([Col("score", justify="right")] if scores is not None else []) + [
        Col("name", whole=True), Col("speedup", 1, "right"), Col("scope", 4), Col("tags", 5),
        Col("step", 6, "right"), Col("used", 7, "right"), Col("improved", 8, "right")]
    rows = []
    for i, s in enumerate(skills):
        row = [] if scores is None else [f"{scores[i]:.2f}"]
        row += [s.name, "-" if s.verify_speedup is None else f"{s.verify_speedup:.2f}x", s.scope,
                ", ".join(s.tags[:3]), "-" if s.step is None else str(s.step), str(s.times_selected),
                str(s.times_improved)]
        rows.append(row)
    print_table(cols, rows, title=title, caption=_SPEEDUP_NOTE if skills else None)


def _meta(s) -> dict:
    return {**s.export_dict(), "source_task": s.source_task, "step": s.step, "gpu": s.gpu,
            "times_selected": s.times_selected, "times_improved": s.times_improved}


def register(app: typer.Typer) -> None:
    def _check_step(step: Optional[int]) -> None:
        if step is not None and step < 0:
            raise UsageError(f"--step {step}: training steps count from 0")

    skills = typer.Typer(help="The skill library: list, search, show, add, import, export.",
                         no_args_is_help=True)

    @skills.command("list")
    def list_cmd(db: Optional[str] = typer.Option(None, "--db", help=_DB_HELP),
                 scope: Optional[str] = typer.Option(None, help="only this scope (general, task_specific/...)"),
                 tag: Optional[list[str]] = typer.Option(None, "--tag", help="only skills with this tag"),
                 step: Optional[int] = typer.Option(None, help="the library as of this training step"),
                 seed: bool = typer.Option(True, "--seed/--no-seed", help=_SEED_HELP),
                 as_json: bool = typer.Option(False, "--json", help="one JSON document on stdout")):
        """Every skill in the library (name, scope, tags, verified speedup, usage)."""
        _check_step(step)
        with _open(db, seed, write=False) as store:
            rows = store.all(step)
        if scope:
            rows = [s for s in rows if s.scope == scope or s.scope.startswith(scope.rstrip("/") + "/")]
        if tag:
            want = {t.lower() for t in tag}
            rows = [s for s in rows if want & {t.lower() for t in s.tags}]
        if as_json:
            print_json([_meta(s) for s in rows])
        else:
            _table(rows, title=f"{len(rows)} skills")

    @skills.command("search")
    def search_cmd(query: str = typer.Argument(..., help="words, code, or a problem (a .py file, or builtin:level1/3_Softmax)"),
                   k: int = typer.Option(20, "--k", "-k", help="how many"),
                   scope: Optional[str] = typer.Option(None, help="only this scope"),
                   tag: Optional[list[str]] = typer.Option(None, "--tag", help="only skills with this tag"),
                   db: Optional[str] = typer.Option(None, "--db", help=_DB_HELP),
                   seed: bool = typer.Option(True, "--seed/--no-seed", help=_SEED_HELP),
                   as_json: bool = typer.Option(False, "--json", help="one JSON document on stdout")):
        """BM25 search; a problem file is turned into a task query first."""
        from .bm25 import SkillIndex, task_query

        if k < 1:
            raise UsageError(f"-k {k}: give how many skills to show, at least 1")
        text = query
        p = Path(query)
        if (p.suffix == ".py" and p.is_file()) or query.startswith(("builtin:", "kernelbench:", "hf:")):
            from ..tasks import load_task

            text = task_query(load_task(query))
        with _open(db, seed, write=False) as store:
            hits = SkillIndex(store.all()).search_scored(text, k=k, scope=scope, tags=tag)
        if as_json:
            print_json([{"score": sc, **_meta(s)} for s, sc in hits])
        else:
            _table([s for s, _ in hits], scores=[sc for _, sc in hits], title=f"top {len(hits)}")

    @skills.command("show")
    def show_cmd(name: str = typer.Argument(..., help="skill name"),
                 step: Optional[int] = typer.Option(None, help="as of this training step"),
                 db: Optional[str] = typer.Option(None, "--db", help=_DB_HELP),
                 seed: bool = typer.Option(True, "--seed/--no-seed", help=_SEED_HELP),
                 as_json: bool = typer.Option(False, "--json", help="one JSON document on stdout")):
        """One skill in full."""
        _check_step(step)
        with _open(db, seed, write=False) as store:
            s = store.get(name, step)
        if as_json:
            print_json(_meta(s))
            return
        from rich.console import Console
        from rich.markdown import Markdown

        c = Console()
        speed = "unverified" if s.verify_speedup is None else f"verified {s.verify_speedup:.2f}x"
        c.print(f"[bold]{s.name}[/bold]  [{s.scope}]  {', '.join(s.tags)}  ({speed})")
        c.print(s.description)
        c.print(Markdown(s.content))

    @skills.command("add")
    def add_cmd(file: str = typer.Argument(..., help="markdown with front matter, or one JSON object"),
                db: Optional[str] = typer.Option(None, "--db", help=_DB_HELP),
                seed: bool = typer.Option(True, "--seed/--no-seed", help=_SEED_HELP),
                no_filter: bool = typer.Option(False, "--no-filter", help="skip the content filter"),
                as_json: bool = typer.Option(False, "--json", help="one JSON document on stdout")):
        """Add one skill (checked for the required sections and by the content filter).

        The file is markdown: a front matter block between '---' lines with name (snake_case),
        description, scope (general or task_specific/<type>) and tags ([a, b]), then the
        content with ## Motivation, ## Key Idea and ## Example (a fenced code block); or one
        JSON object of the exchange format."""
        from .admit import content_filter
        from .markdown import read_skill_file

        skill, _ = read_skill_file(file)
        reason = None if no_filter else content_filter(skill)
        if reason:
            raise UsageError(f"{file}: skill '{skill.name}' rejected: {reason}")
        with _open(db, seed) as store:
            added = store.add(skill)
        if as_json:
            print_json(_meta(added))
        else:
            typer.echo(f"added {added.name} ({len(added.content)} chars)")

    @skills.command("import")
    def import_cmd(jsonl: str = typer.Argument(..., help="one skill per line (exchange format)"),
                   db: Optional[str] = typer.Option(None, "--db", help=_DB_HELP),
                   seed: bool = typer.Option(True, "--seed/--no-seed", help=_SEED_HELP),
                   replace: bool = typer.Option(False, "--replace", help="replace skills of the same name"),
                   as_json: bool = typer.Option(False, "--json", help="one JSON document on stdout")):
        """Import a JSONL library; bad lines are reported and skipped."""
        read_text_file(jsonl, "skills file")  # missing, a folder or not UTF-8: one line, exit 2
        with _open(db, seed) as store:
            n, errors = store.import_jsonl(jsonl, replace=replace)
            total = len(store)
        for line_no, msg in errors:
            typer.echo(f"warning: {jsonl}:{line_no}: {msg}", err=True)
        if errors and not n:
            raise UsageError(f"{jsonl}: none of its {len(errors)} skill lines could be imported (see the warnings "
                             "above); one JSON skill object a line is expected")
        if as_json:
            print_json({"imported": n, "skipped": len(errors), "library_size": total,
                        "errors": [{"line": ln, "error": m} for ln, m in errors]})
        else:
            typer.echo(f"imported {n} skills, skipped {len(errors)} lines; library has {total}")

    @skills.command("export")
    def export_cmd(jsonl: str = typer.Argument(..., help="output file (missing parent folders are created); "
                                                    "- for standard output"),
                   step: Optional[int] = typer.Option(None, help="the library as of this training step"),
                   db: Optional[str] = typer.Option(None, "--db", help=_DB_HELP),
                   seed: bool = typer.Option(True, "--seed/--no-seed", help=_SEED_HELP),
                   as_json: bool = typer.Option(False, "--json", help="one JSON document on stdout")):
        """Write the library as JSONL (one skill per line)."""
        _check_step(step)
        if jsonl == "-" and as_json:
            raise UsageError("export to - writes the library to standard output: --json cannot share it")
        if jsonl != "-":
            check_out_file(jsonl, "export file")  # missing parent folders are created
        with _open(db, seed, write=False) as store:
            n = store.export_jsonl(jsonl, step)
        if jsonl == "-":
            typer.echo(f"exported {n} skills to standard output", err=True)
        elif as_json:
            print_json({"exported": n, "path": str(Path(jsonl).expanduser())})
        else:
            typer.echo(f"exported {n} skills to {jsonl}")

    app.add_typer(skills, name="skills")
