"""``mentis doctor`` and ``mentis stats``: what a person runs when something is off."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console

from mentis.api.stats import StatsResult
from mentis.cli.common import DbOpt, JsonOpt, errors, run_op, settings
from mentis.errors import ConfigError, InvalidInput
from mentis.service.doctor import Finding
from mentis.service.stats import result_lines

commands = typer.Typer()

_COLOURS = {"ok": "green", "warn": "yellow", "fail": "bold red"}


@commands.command()
def doctor(
    db: DbOpt = None,
    as_json: JsonOpt = False,
    address: Annotated[
        str, typer.Option(help="The HTTP address to check (the one `mentis serve --http` would use).")
    ] = "127.0.0.1:9471",
) -> None:
    """Check the installation: store, ledger, model, providers, HTTP port, tokens, hook errors.

    Each line is ok, warn or fail with a one-line fix; the exit code is 1 when anything fails.
    """
    from mentis.http import parse_bind
    from mentis.service import doctor as checks

    with errors():
        try:
            bind = parse_bind(address)
        except ConfigError:
            raise InvalidInput(
                f"--address {address!r}: expected HOST:PORT, e.g. 127.0.0.1:9471", "address"
            ) from None
        findings = checks.run(settings(db), bind)
    failed = any(f.status == "fail" for f in findings)
    if as_json or not sys.stdout.isatty():
        data = {"ok": not failed, "checks": [f.to_json() for f in findings]}
        sys.stdout.write(json.dumps(data, ensure_ascii=False) + "\n")
    else:
        _print_findings(findings)
    if failed:
        raise typer.Exit(1)


def _print_findings(findings: list[Finding]) -> None:
    console = Console()
    for f in findings:
        line = f"[{_COLOURS[f.status]}]{f.status:<4}[/] {f.check:<12} {f.detail}"
        console.print(line, highlight=False, soft_wrap=True)
        if f.fix:
            console.print(f"     {'':<12} [dim]fix:[/] {f.fix}", highlight=False, soft_wrap=True)


@commands.command()
def stats(
    repository: Annotated[str | None, typer.Option("--repo", "-r", help="Only this repository.")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Count what the memory holds: tasks, attempts by status, thoughts by type... (the stats tool)."""
    run_op("stats", db, as_json, {"repository": repository}, _print_stats)


def _print_stats(result: StatsResult) -> None:
    Console().print("\n".join(result_lines(result)), highlight=False)
