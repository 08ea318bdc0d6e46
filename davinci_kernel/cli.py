"""`dvk` — the command line. Thin: parse, call one library function, print.

Exit codes: 0 done (a wrong candidate is a result, not an error), 2 bad usage or
input (one line on stderr, no traceback), 1 our own failure, 3 every model call failed
(``dvk optimize``/``run``: the count and the first reason on stderr), 130 interrupted
(Ctrl-C, and 143 for SIGTERM: one line on stderr says what was saved; a command that saves
as it goes resumes when rerun with the same ``--out``). Commands that print ``--json`` write exactly one JSON
document on stdout. ``dvk --version`` prints the package version.

Each stage registers its own commands through a ``register(app)`` function so this
file stays small: tasks/eval/bench come from ``suite``, skills, optimize/run, train and
report from their packages; ``--json`` output goes through ``files.print_json``.
"""

from __future__ import annotations

import importlib
import sys
from typing import Optional

import typer

from .clihelp import HELP_OPTIONS, tidy
from .errors import EXIT_ALL_CALLS_FAILED, AllCallsFailed, Interrupted, UsageError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings=HELP_OPTIONS,
                  help="davinci-kernel: evaluate, optimize and train GPU-kernel agents with a skill library.\n\n"
                       "Exit codes: 0 done (a wrong kernel is a result), 2 bad usage or input, "
                       "1 our own failure, 3 every model call failed, 130 interrupted (Ctrl-C; 143 on SIGTERM).")

_REGISTRARS = (
    "davinci_kernel.suite.commands",
    "davinci_kernel.skills.commands",
    "davinci_kernel.rollout.commands",
    "davinci_kernel.rl.commands",
    "davinci_kernel.report.commands",
)


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


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("davinci-kernel")
        except PackageNotFoundError:
            v = "unknown (not installed)"
        typer.echo(f"dvk (davinci-kernel) {v}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="print the version and exit"),
) -> None:
    """davinci-kernel: evaluate, optimize and train GPU-kernel agents with a skill library.

    Exit codes: 0 done (a wrong kernel is a result), 2 bad usage or input, 1 our own
    failure, 3 every model call failed, 130 interrupted (Ctrl-C; 143 on SIGTERM).
    """


def _plain_flags(cmd) -> None:
    """On/off flags show no value type in --help (typer would print ``--json <bool>``)."""
    for p in getattr(cmd, "params", ()):
        if getattr(p, "is_flag", False):
            p.metavar = ""
    for sub in getattr(cmd, "commands", {}).values():
        _plain_flags(sub)


def _command():
    import typer.main

    cmd = typer.main.get_command(app)
    _plain_flags(cmd)

    def fix_help(c) -> None:
        orig = c.get_help_option

        def get_help_option(ctx, _orig=orig):
            opt = _orig(ctx)
            if opt is not None:
                opt.metavar = ""
            return opt

        c.get_help_option = get_help_option
        for sub in getattr(c, "commands", {}).values():
            fix_help(sub)

    fix_help(cmd)
    return tidy(cmd)


_signals = {"term": False}  # whether SIGTERM (not Ctrl-C) stopped the command


def _on_sigterm(signum, frame) -> None:
    """SIGTERM (``timeout``, a job scheduler) stops a command as Ctrl-C does, so it says what was
    saved; a second one while it cleans up is ignored (SIGKILL still ends it)."""
    import signal

    _signals["term"] = True
    signal.signal(signal.SIGTERM, _ignore)  # a handler, not SIG_IGN: a process started now still gets SIGTERM
    raise KeyboardInterrupt


def _ignore(signum, frame) -> None:
    pass


def _catch_sigterm():
    """Install ``_on_sigterm``; returns the handler it replaced (None off the main thread)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    _signals["term"] = False
    return signal.signal(signal.SIGTERM, _on_sigterm)


def _interrupt_exit(note: str) -> None:
    term = _signals["term"]
    typer.echo(f"{'terminated (SIGTERM)' if term else 'interrupted'}: {note}", err=True)
    sys.exit(143 if term else 130)


def _on_devnull() -> bool:
    """Whether standard output is /dev/null (rich points it there when its reader went away)."""
    import os

    try:
        a, b = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
    except (OSError, ValueError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _pipe_closed(code, null_before: bool) -> bool:
    """Whether an exit came from a reader that closed the pipe (`dvk ... | head`): click wraps the
    streams when it sees EPIPE; rich points stdout at /dev/null and exits 1."""
    if type(sys.stdout).__name__.lstrip("_") == "PacifyFlushWrapper":
        return True
    return code == 1 and not null_before and _on_devnull()


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the exit flush after a closed pipe cannot fail again."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: Optional[list[str]] = None) -> None:
    import signal

    _register_all()
    before = _catch_sigterm()
    try:
        _main(argv)
    finally:
        if before is not None:  # called in-process (tests): the caller's handler again
            signal.signal(signal.SIGTERM, before)


def _main(argv: Optional[list[str]]) -> None:
    null_before = _on_devnull()
    try:
        rv = _command().main(args=argv, prog_name="dvk", standalone_mode=False)
    except SystemExit as e:  # after a reader closed the pipe (`dvk ... | head`) the command is done: 0
        sys.exit(0 if _pipe_closed(e.code, null_before) else e.code)
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(0)
    except UsageError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except AllCallsFailed as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(EXIT_ALL_CALLS_FAILED)
    except Interrupted as e:
        _interrupt_exit(str(e))
    except KeyboardInterrupt:
        _interrupt_exit("nothing was saved")
    except IsADirectoryError as e:
        typer.echo(f"error: {e.filename or e} is a directory, not a file", err=True)
        sys.exit(2)
    except NotADirectoryError as e:
        typer.echo(f"error: {e.filename or e}: a part of this path is a file, not a folder", err=True)
        sys.exit(2)
    except FileNotFoundError as e:
        typer.echo(f"error: file not found: {e.filename or e}", err=True)
        sys.exit(2)
    except UnicodeDecodeError as e:
        typer.echo(f"error: an input file is not UTF-8 text (byte {e.start}: {e.reason})", err=True)
        sys.exit(2)
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
    # Outside standalone mode typer turns a KeyboardInterrupt (Ctrl-C while a command that
    # does not catch it runs) and an explicit typer.Exit into a returned exit code.
    if isinstance(rv, int) and not isinstance(rv, bool):
        if rv == 130:
            _interrupt_exit("nothing was saved")
        sys.exit(rv)
    sys.exit(0)


if __name__ == "__main__":
    main()
