"""`dvk train sft` and `dvk train rl`: parse, validate the config, call the trainer.

The config (YAML + dotted ``key=value`` overrides) is loaded and validated before any
model is touched, so a bad value exits with code 2 and a one-line message naming the
field, the value and what is allowed. Does not cover training itself.
"""

from __future__ import annotations

import logging
from typing import Optional

import typer


def _setup_logging() -> None:
    logging.basicConfig(level=logging.WARNING, format="warning: %(message)s")
    try:
        import transformers

        transformers.utils.logging.disable_progress_bar()
    except Exception:
        pass


def _echo(msg: str) -> None:
    typer.echo(msg, err=True)


def register(app: typer.Typer) -> None:
    train = typer.Typer(no_args_is_help=True, help="Train the backbone: SFT cold start, then multi-turn RL.")
    ctx = {"allow_extra_args": True, "ignore_unknown_options": True}

    @train.command("rl", context_settings=ctx)
    def rl_cmd(config: str = typer.Option(..., "--config", help="YAML recipe (configs/*.yaml)"),
               out: Optional[str] = typer.Option(None, "--out", help="run directory (default: the config's out)"),
               resume: bool = typer.Option(False, "--resume", help="continue from the newest complete checkpoint"),
               overrides: Optional[list[str]] = typer.Argument(None, help="section.key=value overrides")):
        """Multi-turn REINFORCE (TRLOO) over selection, policy and summary turns."""
        from ..config import load_config

        cfg = load_config(config, overrides or [])
        _setup_logging()
        from .trainer import train_rl

        last = train_rl(cfg, out=out, resume=resume, echo=_echo)
        if last:
            _echo(f"done: step {cfg.rl.steps}, reward/policy {last.get('reward/policy', 0.0):.3f}")

    @train.command("sft", context_settings=ctx)
    def sft_cmd(config: str = typer.Option(..., "--config", help="YAML recipe (configs/*.yaml)"),
                out: Optional[str] = typer.Option(None, "--out", help="output directory (default: the config's out)"),
                overrides: Optional[list[str]] = typer.Argument(None, help="section.key=value overrides")):
        """Supervised cold start on diversity-filtered successful trajectories."""
        from ..config import load_config

        cfg = load_config(config, overrides or [])
        _setup_logging()
        from .sft import train_sft

        info = train_sft(cfg, out=out, echo=_echo)
        _echo(f"done: {info['samples']} samples, model saved to {info['model_dir']}")

    app.add_typer(train, name="train")
