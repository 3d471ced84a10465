"""What every command shares: the common options, the caller, error handling and output.

Output is JSON when ``--json`` is given or stdout is not a terminal, human-readable otherwise.
Errors are one line on stderr and a non-zero exit code (``mentis.errors`` defines the codes).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console

from mentis.api.common import parse
from mentis.cli.progress import stderr_progress
from mentis.config import Settings, default_cli_agent
from mentis.errors import MentisError
from mentis.service.access import resolve_caller
from mentis.service.memory import Caller, Memory
from mentis.service.operations import BY_NAME

err = Console(stderr=True)
progress = stderr_progress

DbOpt = Annotated[
    Path | None,
    typer.Option(
        "--db",
        help="SQLite file (default: $MENTIS_DB or $MENTIS_HOME/mentis.db).",
        show_default=False,
    ),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print JSON (the default when stdout is not a terminal).")
]
RepoOpt = Annotated[str, typer.Option("--repo", "-r", help="Repository identity, e.g. github.com/acme/shop.")]
BranchOpt = Annotated[
    str | None, typer.Option(help="Write to this branch of --repo (docs/branches.md); it must exist.")
]


def settings(db: Path | None) -> Settings:
    return Settings.from_env(db)


def caller(settings: Settings) -> Caller:
    """The agent identity of the CLI's writes."""
    return resolve_caller(settings, default=default_cli_agent())


@contextmanager
def errors() -> Iterator[None]:
    """A MentisError becomes one line on stderr and its exit code."""
    try:
        yield
    except MentisError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None


@contextmanager
def open_memory(db: Path | None, *, check_derived: bool = True) -> Iterator[tuple[Memory, Caller]]:
    config = settings(db)
    with errors():
        memory = Memory.open(config, check_derived=check_derived)
        try:
            yield memory, caller(memory.settings)  # its agent is the signing key's, when one is set
        finally:
            memory.close()


def emit(
    result: BaseModel | dict[str, Any], as_json: bool, human: Callable[[Any], None] | None = None
) -> None:
    data = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
    if as_json or not sys.stdout.isatty() or human is None:
        sys.stdout.write(
            json.dumps(data, ensure_ascii=False, indent=None if not sys.stdout.isatty() else 2) + "\n"
        )
    else:
        human(result)


def run(
    db: Path | None,
    as_json: bool,
    op: Callable[[Memory, Caller], BaseModel],
    human: Callable[[Any], None] | None = None,
    *,
    human_only: bool = False,
) -> None:
    """Open the store, run one operation, print its result (``human_only``: always via ``human``)."""
    with open_memory(db) as (memory, who), errors():
        result = op(memory, who)
        if human_only and human is not None:
            human(result)
        else:
            emit(result, as_json, human)


def run_op(
    name: str,
    db: Path | None,
    as_json: bool,
    data: dict[str, Any],
    human: Callable[[Any], None] | None = None,
    *,
    human_only: bool = False,
) -> None:
    """Run the operation ``name`` (``mentis.service.operations``): ``data`` is validated before the
    store opens."""
    op = BY_NAME[name]
    with errors():
        req = parse(op.input, data)
    run(db, as_json, lambda m, c: op.call(m, c, req), human, human_only=human_only)
