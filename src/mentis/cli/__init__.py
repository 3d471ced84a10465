"""The ``mentis`` command: one command per Memory operation; each parses, calls and formats.

One module per command group registers its commands on its own ``commands``; this module only
assembles them into ``app``. What they share (options, caller, errors, output) is ``cli.common``.
Output is JSON when ``--json`` is given or stdout is not a terminal, human-readable otherwise.
Errors are one line on stderr and a non-zero exit code (``mentis.errors`` defines the codes).
"""

from __future__ import annotations

import typer

from mentis.cli import (
    agents,
    attempts,
    branches,
    checkpoints,
    doctor,
    entity_types,
    hooks,
    install,
    maintenance,
    review,
    serve,
    skills,
    thoughts,
    tokens,
    webhooks,
)
from mentis.cli import embedding_model as model

app = typer.Typer(
    name="mentis",
    help="Mentis: a hash-chained memory of what coding agents tried.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
for group in (
    serve,
    attempts,
    checkpoints,
    maintenance,
    doctor,
    hooks,
    install,
    model,
    tokens,
    thoughts,
    skills,
    agents,
    entity_types,
    review,
    webhooks,
    branches,
):
    app.add_typer(group.commands)


def main() -> None:
    app()
