"""MkDocs hook: add the generated reference pages and the committed result figures to the build.

``reference/cli.md`` and ``reference/config.md`` come from ``davinci_kernel.docref`` (the typer
app and the configuration dataclasses) each time the docs are built, so they cannot go
stale and are never written by hand; the PNG figures under ``bench/results/`` are served as
``results/img/NAME.png`` without a second copy in ``docs/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the package of this checkout, installed or not
    sys.path.insert(0, str(ROOT))


def on_files(files, config):
    from davinci_kernel import docref

    pages = {"reference/cli.md": docref.cli_markdown, "reference/config.md": docref.config_markdown}
    for uri, make in pages.items():
        files.append(File.generated(config, uri, content=make()))
    for png in sorted((ROOT / "bench" / "results").glob("*.png")):
        files.append(File.generated(config, f"results/img/{png.name}", abs_src_path=str(png)))
    return files
