"""``mentis install`` / ``uninstall`` / ``instructions``: put Mentis into a coding-agent harness.

The logic lives in ``mentis.integrations.harnesses``; these commands parse, call and print.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from mentis.cli.common import JsonOpt, emit, err, errors
from mentis.errors import InvalidInput
from mentis.integrations import instructions as agent_instructions
from mentis.integrations.harnesses import HARNESSES, get
from mentis.integrations.harnesses.base import Env, mentis_argv
from mentis.integrations.harnesses.install import (
    Change,
    apply,
    describe,
    plan_install,
    plan_uninstall,
    server_for,
    status,
    token_note,
)

commands = typer.Typer()

HarnessArg = Annotated[
    str | None,
    typer.Argument(help=f"One of: {', '.join(HARNESSES)}.", show_default=False),
]
ProjectOpt = Annotated[
    Path | None,
    typer.Option(
        "--project", help="Write the project-level config of DIR instead of the user's.", metavar="DIR"
    ),
]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the unified diff; write nothing.")]


@commands.command()
def install(
    harness: HarnessArg = None,
    stdio: Annotated[
        bool, typer.Option("--stdio", help="Launch `mentis serve` over stdio (default).")
    ] = False,
    http: Annotated[
        str | None,
        typer.Option("--http", help="Connect to a running `mentis serve --http` at URL.", metavar="URL"),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file", help="With --http: the file holding the token (referenced, never copied)."
        ),
    ] = None,
    tools: Annotated[
        str | None,
        typer.Option(
            "--tools",
            metavar="PROFILE[,PROFILE…]",
            help="The tool profile the stdio server offers (MENTIS_TOOLS in its entry; default: default).",
        ),
    ] = None,
    project: ProjectOpt = None,
    hooks: Annotated[
        bool,
        typer.Option("--hooks", help="Also write hook entries that run `mentis hook <harness> <event>`."),
    ] = False,
    list_: Annotated[
        bool, typer.Option("--list", help="Show each harness: config found? Mentis in it?")
    ] = False,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Add the Mentis MCP server to a harness's own config file, keeping every other setting.

    The file is backed up first and written atomically; running it again changes nothing. The stdio
    entry runs this `mentis` with MENTIS_AGENT_ID set to the harness name. The HTTP entry refers to
    the token through an environment variable (MENTIS_TOKEN) or, where the harness can read one, the
    token file — never the token itself.
    """
    env, argv = Env.current(), mentis_argv()
    with errors():
        if list_:
            if harness or stdio or http or token_file or tools or hooks or dry_run:
                raise InvalidInput("--list takes only --project and --json")
            if project is not None and not project.is_dir():
                raise InvalidInput(f"--project {project}: not a directory", "project")
            emit(
                {"harnesses": [status(h, env, project, argv) for h in HARNESSES.values()]},
                as_json,
                _print_list,
            )
            return
        chosen = get(_named(harness))
        server = server_for(argv, stdio=stdio, url=http, token_file=token_file, tools=tools)
        changes, note = plan_install(chosen, env, server, project, hooks=hooks, argv=argv)
        _finish(chosen.name, "install", changes, dry_run, as_json, note)
    note = None if dry_run else token_note(chosen, http, token_file)
    if note is not None:
        err.print(note, highlight=False, soft_wrap=True)


def _named(harness: str | None) -> str:
    if harness is None:
        raise InvalidInput(f"name a harness ({', '.join(HARNESSES)}) or use --list", "harness")
    return harness


@commands.command()
def uninstall(
    harness: HarnessArg = None,
    project: ProjectOpt = None,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Remove the Mentis entry (and Mentis's hook entries) from a harness's config; nothing else.

    After `mentis install` on a file, `mentis uninstall` gives back its original bytes.
    """
    with errors():
        chosen = get(_named(harness))
        changes = plan_uninstall(chosen, Env.current(), project, mentis_argv())
        _finish(chosen.name, "uninstall", changes, dry_run, as_json, None)


@commands.command()
def instructions(
    harness: Annotated[
        str | None, typer.Option("--harness", help="Name the tools as this harness does.")
    ] = None,
    write: Annotated[
        Path | None,
        typer.Option("--write", help="Insert or update the block in FILE (between markers).", metavar="FILE"),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the block for AGENTS.md / CLAUDE.md that tells an agent when to search, record and correct.

    With --write FILE the block is inserted, or the one already between the Mentis markers replaced;
    a second run changes nothing.
    """
    with errors():
        if harness is not None:
            get(harness)
        block = agent_instructions.render(harness)
        if write is None:
            if as_json:
                emit({"block": block, "suggested_file": agent_instructions.suggested_file(harness)}, True)
            else:
                sys.stdout.write(block)
            return
        changed = agent_instructions.write(write, block)
    emit(
        {"file": str(write), "changed": changed},
        as_json,
        lambda r: err.print(f"{'updated' if r['changed'] else 'unchanged'}: {r['file']}", highlight=False),
    )


def _finish(
    harness: str, action: str, changes: list[Change], dry_run: bool, as_json: bool, note: str | None
) -> None:
    if dry_run:
        report = [{**describe(c), "diff": c.diff()} for c in changes]
        if as_json:
            sys.stdout.write(json.dumps(_result(harness, action, report, note, dry_run=True)) + "\n")
        else:
            sys.stdout.write("".join(r["diff"] for r in report))
            if not any(r["changed"] for r in report):
                err.print(f"{harness}: nothing would change", highlight=False)
            if note:
                err.print(f"hooks: {note}", highlight=False)
        return
    report = apply(changes)
    emit(_result(harness, action, report, note, dry_run=False), as_json, _print_result)


def _result(
    harness: str, action: str, report: list[dict[str, Any]], note: str | None, *, dry_run: bool
) -> dict[str, Any]:
    return {
        "harness": harness,
        "action": action,
        "dry_run": dry_run,
        "file": report[0]["file"] if report else None,
        "changed": any(r["changed"] for r in report),
        "files": report,
        "hooks_note": note,
    }


def _print_result(result: dict[str, Any]) -> None:
    if not result["files"]:
        err.print(f"{result['harness']}: no config file; nothing to {result['action']}", highlight=False)
    for f in result["files"]:
        what = " + ".join(f["parts"])
        if not f["changed"]:
            err.print(f"unchanged: {f['file']} ({what})", highlight=False)
            continue
        verb = "created" if f["created"] else "updated"
        backup = f"; backup {f['backup']}" if f["backup"] else ""
        err.print(f"{verb}: {f['file']} ({what}){backup}", highlight=False, soft_wrap=True)
    if result["hooks_note"]:
        err.print(f"hooks: {result['hooks_note']}", highlight=False)


def _print_list(data: dict[str, Any]) -> None:
    table = Table("harness", "config", "found", "mentis", "hooks")
    mark = {True: "yes", False: "no", None: "-"}
    for row in data["harnesses"]:
        table.add_row(
            row["harness"],
            row["file"] or row.get("note", "-"),
            mark[row["found"]],
            mark[row["mentis"]] if "error" not in row else "error",
            mark[row["hooks"]],
        )
    Console().print(table)
