"""The attempt commands, one per operation and named as it is in kebab-case: record-attempt, search,
recall, mark-conclusion-outdated, forget-attempt, verify-integrity.

The names they had before (record, outdated, forget, verify) stay as hidden aliases.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from mentis.api.attempts import SearchResult
from mentis.api.federation import FederatedSearchResult
from mentis.cli.common import BranchOpt, DbOpt, JsonOpt, RepoOpt, emit, err, errors, open_memory, run, run_op
from mentis.errors import InvalidInput

commands = typer.Typer()


@commands.command("verify", hidden=True)
@commands.command("verify-integrity")
def verify_integrity(
    db: DbOpt = None,
    as_json: JsonOpt = False,
    repository: Annotated[str | None, typer.Option("--repo", "-r", help="Only this chain.")] = None,
    signatures: Annotated[
        bool, typer.Option("--signatures", help="Verify every signature, not only each stream's last.")
    ] = False,
    checkpoints: Annotated[
        list[Path] | None,
        typer.Option(
            "--checkpoint",
            help="A signed checkpoint (or a directory of them) the store must still hold (repeatable).",
        ),
    ] = None,
) -> None:
    """Verify every hash chain; exit non-zero (6) naming chain and seq when the store was altered.

    With --checkpoint, every chain a checkpoint names must still hold its seq with that exact hash
    and its signature must verify with a key active at its time (a rewrite, a cut tail or a rollback
    before it is refused, naming chain, seq and file; a store that is ahead passes)."""
    if not checkpoints:
        run(db, as_json, lambda m, c: m.verify_integrity(c, repository, signatures), _print_verify)
        return
    with open_memory(db) as (memory, who), errors():
        verified = memory.verify_integrity(who, repository, signatures)
        held = memory.verify_checkpoints(who, checkpoints)
        data = verified.model_dump(mode="json") | {"checkpoints": [h.to_json() for h in held]}
    emit(data, as_json, _print_verify_held)


@commands.command("record", hidden=True)
@commands.command("record-attempt")
def record_attempt(
    repository: RepoOpt,
    task_id: Annotated[str, typer.Option("--task", "-t", help="Task id within the repository.")],
    action: Annotated[str, typer.Option(help="What you did.")],
    observation: Annotated[str, typer.Option(help="What you observed.")],
    title: Annotated[
        str | None, typer.Option(help="Task title (kept from the first attempt that gives one).")
    ] = None,
    inference: Annotated[
        str | None, typer.Option(help="What you concluded, kept apart from the observation.")
    ] = None,
    files: Annotated[
        list[str] | None, typer.Option("--file", "-f", help="An affected path (repeatable).")
    ] = None,
    tags: Annotated[list[str] | None, typer.Option("--tag", help="A tag (repeatable).")] = None,
    check_command: Annotated[str | None, typer.Option(help="The check you ran.")] = None,
    check_status: Annotated[str | None, typer.Option(help="passed or failed.")] = None,
    exit_code: Annotated[int | None, typer.Option(help="The check's exit code.")] = None,
    commit: Annotated[str | None, typer.Option(help="Commit the attempt ran on.")] = None,
    visibility: Annotated[
        str | None, typer.Option(help="repository (default), agent or session: who may read it.")
    ] = None,
    branch: BranchOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Record an attempt (the record_attempt tool)."""
    data: dict[str, Any] = {
        "repository": repository,
        "branch": branch,
        "task_id": task_id,
        "task_title": title,
        "action": action,
        "observation": observation,
        "inference": inference,
        "files": files or [],
        "tags": tags or [],
        "visibility": visibility,
    }
    if check_command is not None or check_status is not None or exit_code is not None:
        data["check"] = {"command": check_command, "status": check_status, "exit_code": exit_code}
    if commit is not None:
        data["code_context"] = {"commit": commit}
    run_op("record_attempt", db, as_json, {k: v for k, v in data.items() if v is not None})


@commands.command()
def search(
    query: Annotated[str, typer.Argument(help="The problem, described in your own words.")],
    repository: Annotated[str | None, typer.Option("--repo", "-r", help="Only this repository.")] = None,
    branch: Annotated[
        str | None, typer.Option(help="A branch of --repo: its records and its parent's (docs/branches.md).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="Tasks to return (1-50).")] = 10,
    federated: Annotated[
        bool,
        typer.Option(
            "--federated",
            help="Search this memory and those MENTIS_FEDERATION names, fused by rank "
            "(the federated_search tool).",
        ),
    ] = False,
    memory: Annotated[
        list[str] | None,
        typer.Option(
            "--memory", "-m", help="With --federated: only this memory (repeat; 'local' is this one)."
        ),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search tasks by a problem description (the search tool; --federated: federated_search)."""
    data: dict[str, Any] = {"query": query, "repository": repository, "limit": limit}
    if branch is not None:
        data["branch"] = branch
    if not federated and memory:
        with errors():
            raise InvalidInput(
                "--memory: names a memory of a federated search; add --federated", field="memory"
            )
    if federated:
        run_op("federated_search", db, as_json, {**data, "memories": memory or None}, _print_federated)
    else:
        run_op("search", db, as_json, data, _print_search)


@commands.command()
def recall(
    sql: Annotated[
        str | None,
        typer.Argument(help="Read-only SQL over the views tasks, attempts, corrections."),
    ] = None,
    repository: Annotated[
        str | None, typer.Option("--repo", "-r", help="With --task: that task's history.")
    ] = None,
    task_id: Annotated[str | None, typer.Option("--task", "-t", help="Task id for its full history.")] = None,
    param: Annotated[
        list[str] | None, typer.Option("--param", "-p", help="NAME=VALUE for :NAME in the SQL.")
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A task's full history, or read-only SQL over the documented views (the recall tool)."""
    with errors():
        params = dict(_split_param(p) for p in param or [])
    data = {"sql": sql, "repository": repository, "task_id": task_id, "params": params or None}
    run_op("recall", db, as_json, data, _print_rows)


def _split_param(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise InvalidInput(f"--param {text!r}: expected NAME=VALUE")
    return name, value


@commands.command("outdated", hidden=True)
@commands.command("mark-conclusion-outdated")
def mark_conclusion_outdated(
    repository: RepoOpt,
    attempt_id: Annotated[str, typer.Argument(help="The attempt whose conclusion is outdated.")],
    reason: Annotated[str, typer.Option(help="Why it no longer holds.")],
    latest_commit: Annotated[str | None, typer.Option(help="Commit where you saw that.")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Mark an attempt's conclusion outdated (the mark_conclusion_outdated tool)."""
    data = {"repository": repository, "attempt_id": attempt_id, "reason": reason}
    run_op("mark_conclusion_outdated", db, as_json, {**data, "latest_commit": latest_commit or None})


@commands.command("forget", hidden=True)
@commands.command("forget-attempt")
def forget_attempt(
    repository: RepoOpt,
    attempt_id: Annotated[str, typer.Argument(help="The attempt to erase.")],
    reason: Annotated[str | None, typer.Option(help="Why (kept in the tombstone).")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Erase an attempt's content; the ledger keeps a tombstone (the forget_attempt tool)."""
    data = {"repository": repository, "attempt_id": attempt_id, "reason": reason}
    run_op("forget_attempt", db, as_json, data)


def _print_search(result: SearchResult) -> None:
    console = Console()
    if not result.tasks:
        console.print("no matching tasks")
    for i, t in enumerate(result.tasks, start=1):
        a = t.attempt
        flag = " [yellow](outdated)[/]" if a.correction else ""
        console.print(
            f"[bold]{i}. {t.title or t.task_id}[/]  {t.repository} · {t.task_id} · "
            f"{t.attempt_count} attempt(s) · score {t.score:.4f}"
        )
        console.print(f"   [{_colour(a.status)}]{a.status}[/]{flag} {a.action}", highlight=False)
        console.print(f"   {a.observation[:300]}", highlight=False)
        if a.correction:
            console.print(f"   [yellow]outdated:[/] {a.correction.reason}", highlight=False)
    console.print(f"[dim]ranking: {result.ranking}[/]")


def _print_federated(result: FederatedSearchResult) -> None:
    console = Console()
    if not result.tasks:
        console.print("no matching tasks")
    for i, f in enumerate(result.tasks, start=1):
        t, a = f.task, f.task.attempt
        ranks = ", ".join(f"{r.memory} #{r.rank}" for r in f.ranks)
        console.print(
            f"[bold]{i}. {t.title or t.task_id}[/]  [{f.memory}] {t.repository} · {t.task_id} · "
            f"{t.attempt_count} attempt(s) · ranks {ranks} · fused {f.fused:.4f}",
            highlight=False,
        )
        console.print(f"   [{_colour(a.status)}]{a.status}[/] {a.action}", highlight=False)
        console.print(f"   {a.observation[:300]}", highlight=False)
        if a.correction:
            console.print(f"   [yellow]outdated:[/] {a.correction.reason}", highlight=False)
    for d in result.unavailable:
        console.print(f"[red]unavailable:[/] {d.memory}: {d.reason}", highlight=False)
    console.print(f"[dim]ranking: {result.ranking}[/]")


def _colour(status: str) -> str:
    return {"passed": "green", "failed": "red"}.get(status, "yellow")


def _print_rows(result: Any) -> None:
    table = Table(*result.columns)
    for row in result.rows:
        table.add_row(*(json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v for v in row))
    Console().print(table)
    if result.truncated:
        err.print(f"truncated: {result.truncation_reason}")


def _print_verify_held(data: dict[str, Any]) -> None:
    console = Console()
    for c in data["chains"]:
        console.print(
            f"[green]ok[/] {c['chain']}: {c['entries']} entries, head seq {c['head_seq']}", highlight=False
        )
    for h in data["checkpoints"]:
        console.print(
            f"[green]held[/] {h['file']}: {h['chains']} chain(s), signed by {h['agent']} at {h['at']}",
            highlight=False,
        )
    console.print(f"{len(data['chains'])} chain(s) verified, {len(data['checkpoints'])} checkpoint(s) held")


def _print_verify(result: Any) -> None:
    console = Console()
    for c in result.chains:
        console.print(
            f"[green]ok[/] {c.chain}: {c.entries} entries, head seq {c.head_seq}, "
            f"{c.bodies_erased} bodies erased",
            highlight=False,
        )
    console.print(f"{len(result.chains)} chain(s) verified")
