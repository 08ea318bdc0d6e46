"""`dvk train sft` and `dvk train rl`: parse, validate the config, call the trainer.

The config (YAML + dotted ``key=value`` overrides) is loaded and validated before any
model is touched, so a bad value exits with code 2 and a one-line message naming the
field, the value and what is allowed; so do a config or ``sft.data`` file that is not
UTF-8, an ``--out`` under a regular file, no model or a model folder that is not there
and missing ``sft.data`` paths, all before the run folder is made. ``train rl`` refuses an
``--out`` that already holds a training run (a complete step: a complete checkpoint, a metrics
line, an SFT model; a folder with only what a run writes before its first step counts as
empty) unless ``--resume`` (continue it) or ``--overwrite``
(delete it whole first) is given; resuming a run that reached ``rl.steps`` says so and
exits 0. Ctrl-C exits 130 naming the newest complete checkpoint; a generation server that
fails mid-run (a failed weight sync, a dead server) stops it with one line and exit 1,
naming the newest complete checkpoint. Does not cover
training itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import typer

from ..cliconfig import ALLOW_HELP, OVERRIDES_HELP, check_resume, command_config
from ..errors import Interrupted, UsageError, check_out_dir, check_utf8
from ..files import print_json
from ..llm.spec import check_model
from ..rundir import LOCK_FILE, METRICS_FILE, RUN_FILE, claim
from . import trackers

# what a `dvk train rl` run directory holds (any of them marks one)
_RUN_MARKERS = (METRICS_FILE, "checkpoints", "config.json")
_SFT_MARKERS = (*_RUN_MARKERS, "model")


def _setup_logging() -> None:
    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s")
    try:
        import transformers

        transformers.utils.logging.disable_progress_bar()
    except Exception:
        pass


def _echo(msg: str) -> None:
    typer.echo(msg, err=True)


def _locked(out: Path):
    """The run folder, locked for this command (``rundir.claim``: a second command into it is one
    line, exit 2); in a multi-process launch only the main process takes the lock."""
    if int(os.environ.get("RANK", "0")) != 0:
        return contextlib.nullcontext()
    return claim(out)


def _latest_step(out: Path) -> Optional[int]:
    from . import checkpoint as ckpt

    root = out / "checkpoints"
    found = ckpt.latest_complete(root) if root.is_dir() else None
    return found[0] if found else None


def prepare_rl_out(out: Path, resume: bool, overwrite: bool, steps: int) -> Optional[str]:
    """Check ``--out`` of a `train rl` run before anything is loaded. Returns a message when
    the run is already finished (nothing to do), else None."""
    _prepare_out(out, resume, overwrite, _RUN_MARKERS)
    if resume:
        last = _latest_step(out)
        if last is not None and last >= steps:
            return (f"the run in {out} is finished: its newest checkpoint is step {last} and rl.steps={steps}; "
                    "nothing to do (raise rl.steps to train further)")
    return None


def prepare_sft_out(out: Path, resume: bool, overwrite: bool, epochs: int) -> Optional[str]:
    """Check ``--out`` of a `train sft` run before anything is loaded: a folder holding a run (a
    model, checkpoints, metrics) is never trained over without --resume or --overwrite. Returns a
    message when the run is already finished, else None."""
    _prepare_out(out, resume, overwrite, _SFT_MARKERS)
    if resume:
        last = _latest_step(out)
        if last is not None and last >= epochs and (out / "model").is_dir():
            return (f"the SFT run in {out} is finished: its newest checkpoint is after epoch {last} and "
                    f"sft.epochs={epochs}; nothing to do (raise sft.epochs to train further)")
    return None


def holds_work(out: Path, markers: tuple = _SFT_MARKERS) -> bool:
    """Whether ``out`` holds a complete step of a training run: a complete checkpoint, a metrics
    line, or (SFT) a saved model. A folder with only what a run writes before its first step
    (run.json, config.json, an empty checkpoints/, a built tiny model) holds none: it counts as
    empty, so a corrected rerun just works."""
    if not out.is_dir():
        return False
    if _latest_step(out) is not None:
        return True
    metrics = out / METRICS_FILE
    if metrics.is_file() and metrics.stat().st_size > 0:
        return True
    model = out / "model"
    return "model" in markers and model.is_dir() and any(model.iterdir())


_SETUP_FILES = (RUN_FILE, "config.json", METRICS_FILE)  # written before the first step


def _clear_setup(out: Path) -> None:
    """The files a run that never finished a step left behind (run.json, config.json, an empty
    metrics.jsonl, an empty checkpoints/ or model/): removed, so the rerun starts as new."""
    for name in _SETUP_FILES:
        f = out / name
        if f.is_file() and not f.is_symlink():
            f.unlink()
    for name in ("checkpoints", "model"):
        d = out / name
        if d.is_dir() and not d.is_symlink():
            shutil.rmtree(d, ignore_errors=True)


def _prepare_out(out: Path, resume: bool, overwrite: bool, markers: tuple) -> None:
    check_out_dir(out)
    if resume and overwrite:
        raise UsageError("--resume and --overwrite exclude each other: continue the run or start it over")
    has_run = holds_work(out, markers)
    if not has_run:
        if out.is_dir() and any((out / m).exists() for m in (*markers, RUN_FILE)):
            _clear_setup(out)  # an earlier start that failed before its first step: nothing to keep
        return
    if not resume:
        if not overwrite:
            raise UsageError(f"--out {out} already holds a training run: continue it with --resume, start over "
                             "with --overwrite (deletes it), or choose a new --out")
        here = Path.cwd().resolve()
        target = out.resolve()
        if target in (here, Path.home().resolve(), *here.parents):
            raise UsageError(f"--overwrite would delete {target}, which holds the current folder or your home; "
                             "choose a new --out")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise UsageError(f"--overwrite runs in one process only: delete {out} before a multi-process launch")
        for child in out.iterdir():  # all but the lock this command holds
            if child.name != LOCK_FILE:
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        _echo(f"deleted the earlier run in {out} (--overwrite)")


SECTIONS = ("eval", "skills", "rollout", "reward", "rl", "sft")


def _check_resumed_config(out: Path, cfg, allow: Optional[list[str]], more: str) -> None:
    """The run's saved config.json against this one: a change of results needs --allow-config-change
    (``more``: the field that says how long to train, which a resume may raise)."""
    import json

    saved_file = out / "config.json"
    if not saved_file.is_file():
        return
    try:
        saved = json.loads(saved_file.read_text(encoding="utf-8"))
    except (ValueError, OSError):
        raise UsageError(f"{saved_file} is not readable JSON: the run's config cannot be compared") from None
    if not isinstance(saved, dict):
        raise UsageError(f"{saved_file} is not a saved config")
    for change in check_resume(saved, cfg, allow, str(out), ignore=(more,)):
        _echo(f"note: resuming with a changed config ({change}; --allow-config-change)")


def _check_sft_data(specs: list) -> None:
    """Every local sft.data path exists and every file (and the *.jsonl of a data folder) is
    UTF-8, so bad data is one line before the run folder is made or a model loaded."""
    if not specs:
        raise UsageError("sft.data is empty: give JSONL conversation files, run dirs, or hf:NAME datasets")
    for spec in specs:
        spec = str(spec)
        if spec.startswith("hf:"):
            continue
        p = Path(spec).expanduser()
        if not p.exists():
            raise UsageError(f"sft.data: '{spec}' is neither a file, a directory nor hf:NAME")
        files = sorted(p.rglob("*.jsonl")) if p.is_dir() else [p] if p.is_file() else []
        for f in files:
            check_utf8(f, "sft.data file")


@contextlib.contextmanager
def _training_run(ctx, config: str, overrides, out: Optional[str], command: str, resume: bool, overwrite: bool,
                  allow: Optional[list[str]], more: str, prepare: Callable[[Path, object], Optional[str]],
                  check: Callable[[object], None]):
    """What `train rl` and `train sft` do before training, for the block that trains: the
    config loaded and checked, the run folder locked (``prepare(folder, cfg)`` checks it and
    returns a message when the run is already finished), a resumed run's config compared
    (``more``: the field a resume may raise; ``check(cfg)``: the inputs checked before the folder
    is made). Yields (config, run folder, finished message)."""
    cfg = command_config(ctx, config, overrides, {"out": (("out",), out)}, SECTIONS, command)
    out_dir = check_out_dir(Path(cfg.out).expanduser())
    if allow and not resume:
        raise UsageError("--allow-config-change goes with --resume")
    trackers.check(cfg.report_to)
    check(cfg)
    with _locked(out_dir):
        finished = prepare(out_dir, cfg)
        if resume:
            _check_resumed_config(out_dir, cfg, allow, more)
        if finished:
            _echo(finished)
        yield cfg, out_dir, finished


def register(app: typer.Typer) -> None:
    train = typer.Typer(no_args_is_help=True, help="Train the backbone: SFT cold start, then multi-turn RL.")
    @train.command("rl")
    def rl_cmd(ctx: typer.Context,
               config: str = typer.Option(..., "--config", help="YAML recipe (configs/*.yaml)"),
               out: Optional[str] = typer.Option(None, "--out", help="run directory, created with missing parent "
                                                                    "folders (default: the config's out)"),
               resume: bool = typer.Option(False, "--resume", help="continue the run in --out from its newest "
                                                                   "complete checkpoint"),
               overwrite: bool = typer.Option(False, "--overwrite", help="delete the run already in --out, whole, "
                                                                         "and start over"),
               allow: Optional[list[str]] = typer.Option(None, "--allow-config-change", metavar="FIELD",
                                                         help=ALLOW_HELP),
               json_out: bool = typer.Option(False, "--json", help="print one JSON summary on stdout when done"),
               overrides: Optional[list[str]] = typer.Argument(None, metavar="SECTION.KEY=VALUE",
                                                               help=OVERRIDES_HELP)):
        """Multi-turn REINFORCE (TRLOO) over selection, policy and summary turns.

        An --out that already holds a run is refused unless --resume or --overwrite is given;
        a --resume whose config changes results (rl.steps aside) is refused unless each change is
        named with --allow-config-change."""
        with _training_run(ctx, config, overrides, out, "train rl", resume, overwrite, allow, "rl.steps",
                           lambda d, cfg: prepare_rl_out(d, resume, overwrite, cfg.rl.steps),
                           lambda cfg: check_model(cfg.rl.model, "rl.model")) as (cfg, out_dir, finished):
            if finished:
                if json_out:
                    print_json({"out": str(out_dir), "steps": cfg.rl.steps, "finished_before": True, "last": None})
                return
            _setup_logging()
            from ..llm.server_client import ServerError
            from .trainer import train_rl

            try:
                last = train_rl(cfg, out=str(out_dir), resume=resume, echo=_echo)
            except ServerError as e:  # the generation server failed mid-run: what was saved is kept
                step = _latest_step(out_dir)
                kept = f"checkpoints up to step {step} kept; continue with --resume" if step is not None else \
                    "no complete checkpoint yet"
                _echo(f"error: the run stopped: {e}; {kept}")
                raise typer.Exit(1) from None
            except KeyboardInterrupt:
                step = _latest_step(out_dir)
                saved = (f"checkpoints up to step {step} are in {out_dir / 'checkpoints'}; continue with --resume"
                         if step is not None else f"no complete checkpoint in {out_dir} yet")
                raise Interrupted(saved) from None
            if last:
                _echo(f"done: step {cfg.rl.steps}, reward/policy {last.get('reward/policy', 0.0):.3f}")
            if json_out:
                print_json({"out": str(out_dir), "steps": cfg.rl.steps, "finished_before": False,
                            "checkpoints": str(out_dir / "checkpoints"), "last": last or None})

    @train.command("sft")
    def sft_cmd(ctx: typer.Context,
                config: str = typer.Option(..., "--config", help="YAML recipe (configs/*.yaml)"),
                out: Optional[str] = typer.Option(None, "--out", help="output directory, created with missing parent "
                                                                     "folders (default: the config's out)"),
                resume: bool = typer.Option(False, "--resume", help="continue the run in --out from its newest "
                                                                   "complete checkpoint (one after every epoch)"),
                overwrite: bool = typer.Option(False, "--overwrite", help="delete the run already in --out, whole, "
                                                                          "and start over"),
                allow: Optional[list[str]] = typer.Option(None, "--allow-config-change", metavar="FIELD",
                                                          help=ALLOW_HELP),
                json_out: bool = typer.Option(False, "--json", help="print one JSON summary on stdout when done"),
                overrides: Optional[list[str]] = typer.Argument(None, metavar="SECTION.KEY=VALUE",
                                                                help=OVERRIDES_HELP)):
        """Supervised cold start on diversity-filtered successful trajectories.

        A checkpoint is saved after every epoch; an --out that already holds a run (a model,
        checkpoints) is refused unless --resume or --overwrite is given."""
        def check(cfg) -> None:
            _check_sft_data(cfg.sft.data)
            check_model(cfg.sft.model, "sft.model")

        with _training_run(ctx, config, overrides, out, "train sft", resume, overwrite, allow, "sft.epochs",
                           lambda d, cfg: prepare_sft_out(d, resume, overwrite, cfg.sft.epochs),
                           check) as (cfg, out_dir, finished):
            if finished:
                if json_out:
                    print_json({"out": str(out_dir), "finished_before": True, "model_dir": str(out_dir / "model")})
                return
            _setup_logging()
            from .sft import train_sft

            out = str(out_dir)
            try:
                info = train_sft(cfg, out=out, echo=_echo, resume=resume)
            except KeyboardInterrupt:
                epoch = _latest_step(out_dir)
                raise Interrupted(f"checkpoints up to epoch {epoch} are in {out_dir / 'checkpoints'}; continue with "
                                  "--resume" if epoch is not None else
                                  f"no epoch finished, nothing was saved in {out_dir}") from None
            _echo(f"done: {info['samples']} samples, model saved to {info['model_dir']}")
            if json_out:
                print_json({"out": str(out), **info})

    app.add_typer(train, name="train")
