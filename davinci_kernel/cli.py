"""`dvk` — the command line. Thin: parse, call one library function, print.

Exit codes: 0 done (a wrong candidate is a result, not an error), 2 bad usage or
input (one line on stderr, no traceback), 1 our own failure. Commands that print
``--json`` write exactly one JSON document on stdout.

Each stage registers its own commands through a ``register(app)`` function so this
file stays small: tasks/eval/bench live here; skills, optimize/run, train and report
come from their packages.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Optional

import typer

from .errors import UsageError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="davinci-kernel: evaluate, optimize and train GPU-kernel agents with a skill library.")

_REGISTRARS = (
    "davinci_kernel.commands_eval",
    "davinci_kernel.skills.commands",
    "davinci_kernel.rollout.commands",
    "davinci_kernel.rl.commands",
    "davinci_kernel.report.commands",
)


def print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


def _register_all() -> None:
    for modname in _REGISTRARS:
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as e:
            if e.name == modname:  # stage not present in this build
                continue
            raise
        mod.register(app)


def _click_exceptions() -> tuple:
    """ClickException and Abort classes, from typer's bundled click and/or click itself."""
    usage, abort = [], []
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        for cls_name, bucket in (("ClickException", usage), ("Abort", abort)):
            cls = getattr(mod, cls_name, None)
            if cls is not None:
                bucket.append(cls)
    return tuple(usage) or (RuntimeError,), tuple(abort) or (RuntimeError,)


@app.callback()
def _root() -> None:
    """davinci-kernel: evaluate, optimize and train GPU-kernel agents with a skill library."""


def main(argv: Optional[list[str]] = None) -> None:
    _register_all()
    try:
        app(args=argv, standalone_mode=False)
    except UsageError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except FileNotFoundError as e:
        typer.echo(f"error: file not found: {e.filename or e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # click's usage errors carry their own exit code (2)
        click_exc = _click_exceptions()
        if isinstance(e, click_exc[0]):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, click_exc[1]):
            sys.exit(1)
        raise
    sys.exit(0)


if __name__ == "__main__":
    main()
