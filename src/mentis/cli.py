"""The ``mentis`` command: one command per Memory operation; each parses, calls and formats.

Output is JSON when ``--json`` is given or stdout is not a terminal, human-readable otherwise.
Errors are one line on stderr and a non-zero exit code (``mentis.errors`` defines the codes).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from mentis.config import Settings, default_cli_agent
from mentis.errors import InvalidInput, MentisError
from mentis.memory import Caller, Memory
from mentis.model import (
    ForgetInput,
    MarkOutdatedInput,
    RecallInput,
    RecordAttemptInput,
    SearchInput,
    SearchResult,
    parse,
)
from mentis.progress import stderr_progress

app = typer.Typer(
    name="mentis",
    help="Mentis: a hash-chained memory of what coding agents tried.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)
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


def _settings(db: Path | None) -> Settings:
    return Settings.from_env(db)


def _caller(settings: Settings) -> Caller:
    return Caller(agent_id=settings.agent_id or default_cli_agent())


@contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except MentisError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None


@contextmanager
def _memory(db: Path | None) -> Iterator[tuple[Memory, Caller]]:
    settings = _settings(db)
    with _errors():
        memory = Memory.open(settings)
        try:
            yield memory, _caller(settings)
        finally:
            memory.close()


def _emit(
    result: BaseModel | dict[str, Any], as_json: bool, human: Callable[[Any], None] | None = None
) -> None:
    data = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
    if as_json or not sys.stdout.isatty() or human is None:
        sys.stdout.write(
            json.dumps(data, ensure_ascii=False, indent=None if not sys.stdout.isatty() else 2) + "\n"
        )
    else:
        human(result)


def _run(
    db: Path | None,
    as_json: bool,
    op: Callable[[Memory, Caller], BaseModel],
    human: Callable[[Any], None] | None = None,
    *,
    human_only: bool = False,
) -> None:
    """Open the store, run one operation, print its result (``human_only``: always via ``human``)."""
    with _memory(db) as (memory, caller), _errors():
        result = op(memory, caller)
        if human_only and human is not None:
            human(result)
        else:
            _emit(result, as_json, human)


# ---------------------------------------------------------------- commands


@app.command()
def serve(
    db: DbOpt = None,
    http: Annotated[
        bool, typer.Option("--http", help="Serve MCP (/mcp) and REST (/v1) over HTTP instead of stdio.")
    ] = False,
    bind: Annotated[
        str | None,
        typer.Argument(
            metavar="[HOST:PORT]",
            help="With --http: where to listen (default 127.0.0.1:9471).",
            show_default=False,
        ),
    ] = None,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="HTTP without tokens: only on a loopback address.")
    ] = False,
    tls_cert: Annotated[
        Path | None, typer.Option(help="PEM certificate: serve HTTPS (with --tls-key).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="PEM private key of --tls-cert.")] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="Another NAME or NAME:PORT clients may reach the server by (repeatable; no port: this one).",
        ),
    ] = None,
) -> None:
    """Run the MCP server over stdio (what coding-agent harnesses launch), or over HTTP with --http.

    The store is opened and verified first; a store that does not verify is refused. Over HTTP every
    route but /health needs a bearer token (`mentis token create`); on a store without tokens a
    first admin token is written to admin.token next to the store (mode 0600).
    """
    import anyio

    from mentis.mcp_server import build_server, run_stdio

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    settings = _settings(db)
    if http:
        _serve_http(settings, bind or "", no_auth, tls_cert, tls_key, tuple(allow_host or ()))
        return
    if bind or no_auth or tls_cert or tls_key or allow_host:
        err.print(
            "error: HOST:PORT, --no-auth, --tls-cert, --tls-key and --allow-host need --http", highlight=False
        )
        raise typer.Exit(2)
    with _errors():
        memory = Memory.open(settings)
    memory.warm_up()
    err.print(f"mentis: serving MCP on stdio; store {settings.db_path} verified.", highlight=False)
    err.print(_harness_hint(settings), highlight=False)
    try:
        anyio.run(run_stdio, build_server(memory))
    finally:
        memory.close()


def _serve_http(
    settings: Settings,
    bind: str,
    no_auth: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
    allow_hosts: tuple[str, ...],
) -> None:
    from mentis.auth import ADMIN_TOKEN_FILE, TokenStore, bootstrap_admin
    from mentis.http import HttpConfig, build_app, listen, parse_bind, server

    with ExitStack() as stack, _errors():
        host, port = parse_bind(bind)
        config = HttpConfig(
            host=host,
            port=port,
            auth=not no_auth,
            allowed_hosts=allow_hosts,
            tls_cert=tls_cert,
            tls_key=tls_key,
        )
        tokens = None if no_auth else stack.enter_context(closing(TokenStore.open(settings)))
        admin_file = settings.db_path.parent / ADMIN_TOKEN_FILE
        created = tokens is not None and bootstrap_admin(tokens, admin_file)
        memory = stack.enter_context(closing(Memory.open(settings)))
        memory.warm_up()
        sock = stack.enter_context(closing(listen(config)))
        name = sock.getsockname()
        url = f"{config.scheme}://{'[' + name[0] + ']' if ':' in name[0] else name[0]}:{name[1]}"
        for line in _http_banner(settings, url, tokens is not None, admin_file, created):
            err.print(line, highlight=False, soft_wrap=True, markup=False)
        server(build_app(memory, tokens, config), config).run(sockets=[sock])


def _http_banner(settings: Settings, url: str, auth: bool, admin_file: Path, created: bool) -> list[str]:
    lines = [
        f"mentis: serving HTTP on {url} (MCP {url}/mcp, REST {url}/v1, OpenAPI {url}/v1/openapi.json, "
        f"dashboard {url}/dashboard); "
        f"store {settings.db_path} verified."
    ]
    if not auth:
        lines.append("warning: --no-auth: anyone on this machine can read and write this memory.")
    else:
        if admin_file.exists():
            lines.append(f"admin token {'written to' if created else 'in'} {admin_file} (mode 0600); try:")
            lines.append(
                f'  curl -H "Authorization: Bearer $(cat {admin_file})" -H "Content-Type: application/json" '
                f"-d '{{}}' {url}/v1/verify_integrity"
            )
        lines.append("more tokens: mentis token create --repo 'github.com/acme/*' --scope write --agent NAME")
    entry = {"type": "http", "url": f"{url}/mcp", "headers": {"Authorization": "Bearer <token>"}}
    lines.append("harness config: " + json.dumps({"mcpServers": {"mentis": entry}}))
    return lines


def _harness_hint(settings: Settings) -> str:
    entry = {
        "mcpServers": {
            "mentis": {
                "command": sys.argv[0] if sys.argv[0].endswith("mentis") else "mentis",
                "args": ["serve"],
                "env": {"MENTIS_DB": str(settings.db_path)},
            }
        }
    }
    return "harness config (e.g. .mcp.json):\n" + json.dumps(entry, indent=2)


@app.command()
def verify(
    db: DbOpt = None,
    as_json: JsonOpt = False,
    repository: Annotated[str | None, typer.Option("--repo", "-r", help="Only this chain.")] = None,
) -> None:
    """Verify every hash chain; exit non-zero (6) naming chain and seq when the store was altered."""
    _run(db, as_json, lambda m, c: m.verify_integrity(c, repository), _print_verify)


@app.command()
def record(
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
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Record an attempt (the record_attempt tool)."""
    data: dict[str, Any] = {
        "repository": repository,
        "task_id": task_id,
        "task_title": title,
        "action": action,
        "observation": observation,
        "inference": inference,
        "files": files or [],
        "tags": tags or [],
    }
    if check_command is not None or check_status is not None or exit_code is not None:
        data["check"] = {"command": check_command, "status": check_status, "exit_code": exit_code}
    if commit is not None:
        data["code_context"] = {"commit": commit}
    with _errors():
        req = parse(RecordAttemptInput, {k: v for k, v in data.items() if v is not None})
    _run(db, as_json, lambda m, c: m.record_attempt(c, req))


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="The problem, described in your own words.")],
    repository: Annotated[str | None, typer.Option("--repo", "-r", help="Only this repository.")] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", help="Tasks to return (1-50).")] = 10,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search tasks by a problem description (the search tool)."""
    with _errors():
        req = parse(SearchInput, {"query": query, "repository": repository, "limit": limit})
    _run(db, as_json, lambda m, c: m.search(c, req), _print_search)


@app.command()
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
    with _errors():
        params = dict(_split_param(p) for p in param or [])
        req = parse(
            RecallInput, {"sql": sql, "repository": repository, "task_id": task_id, "params": params or None}
        )
    _run(db, as_json, lambda m, c: m.recall(c, req), _print_rows)


def _split_param(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise InvalidInput(f"--param {text!r}: expected NAME=VALUE")
    return name, value


@app.command()
def outdated(
    repository: RepoOpt,
    attempt_id: Annotated[str, typer.Argument(help="The attempt whose conclusion is outdated.")],
    reason: Annotated[str, typer.Option(help="Why it no longer holds.")],
    latest_commit: Annotated[str | None, typer.Option(help="Commit where you saw that.")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Mark an attempt's conclusion outdated (the mark_conclusion_outdated tool)."""
    with _errors():
        req = parse(
            MarkOutdatedInput,
            {
                "repository": repository,
                "attempt_id": attempt_id,
                "reason": reason,
                **({"latest_commit": latest_commit} if latest_commit else {}),
            },
        )
    _run(db, as_json, lambda m, c: m.mark_conclusion_outdated(c, req))


@app.command()
def forget(
    repository: RepoOpt,
    attempt_id: Annotated[str, typer.Argument(help="The attempt to erase.")],
    reason: Annotated[str | None, typer.Option(help="Why (kept in the tombstone).")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Erase an attempt's content; the ledger keeps a tombstone (the forget_attempt tool)."""
    with _errors():
        req = parse(ForgetInput, {"repository": repository, "attempt_id": attempt_id, "reason": reason})
    _run(db, as_json, lambda m, c: m.forget_attempt(c, req))


@app.command()
def export(
    output: Annotated[Path, typer.Argument(help="JSONL file to write ('-' for stdout).")],
    repository: Annotated[str | None, typer.Option("--repo", "-r", help="Only this chain.")] = None,
    db: DbOpt = None,
) -> None:
    """Write the ledger and bodies as JSONL, verifiable offline and by `mentis import`."""
    with _memory(db) as (memory, caller), _errors(), progress() as bar:
        total = None if repository else memory.store.counts()["entries"]
        job = bar.add_task("exporting", total=total)
        if str(output) == "-":
            count = memory.export(caller, sys.stdout.buffer, repository, lambda n: bar.advance(job, n))
        else:
            with output.open("wb") as fh:
                count = memory.export(caller, fh, repository, lambda n: bar.advance(job, n))
    err.print(f"exported {count} entries", highlight=False)


@app.command("import")
def import_(
    source: Annotated[
        Path, typer.Argument(help="A file written by `mentis export`.", exists=True, dir_okay=False)
    ],
    db: DbOpt = None,
) -> None:
    """Verify an export completely, then add its chains to this store (nothing is written if it fails)."""
    with (
        _memory(db) as (memory, caller),
        _errors(),
        source.open("rb") as fh,
        progress() as bar,
    ):
        job = bar.add_task("importing (embedding attempts and thoughts)", total=None)
        count = memory.import_(caller, fh, lambda n: bar.advance(job, n))
    err.print(f"imported {count} entries; store verified", highlight=False)


@app.command()
def reindex(db: DbOpt = None) -> None:
    """Re-embed the whole store with the configured embedder (MENTIS_EMBEDDER), e.g. after a model change."""
    settings = _settings(db)
    with _errors():
        memory = Memory.open(settings, check_model=False)
    try:
        with _errors(), progress() as bar:
            job = bar.add_task(
                f"embedding with {memory.embedder.model_id}", total=memory.store.counts()["entries"]
            )
            count = memory.reindex(lambda n: bar.advance(job, n))
    finally:
        memory.close()
    err.print(
        f"re-embedded the store from {count} ledger entries with {memory.embedder.model_id}", highlight=False
    )


@app.command()
def rebuild(db: DbOpt = None) -> None:
    """Regenerate every derived table (search indexes, vectors) from the ledger."""
    with _memory(db) as (memory, _), _errors(), progress() as bar:
        job = bar.add_task("rebuilding", total=None)
        count = memory.rebuild(lambda n: bar.advance(job, n))
    err.print(f"rebuilt derived tables from {count} ledger entries", highlight=False)


# ---------------------------------------------------------------- human output


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


def _colour(status: str) -> str:
    return {"passed": "green", "failed": "red"}.get(status, "yellow")


def _print_rows(result: Any) -> None:
    table = Table(*result.columns)
    for row in result.rows:
        table.add_row(*(json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else v for v in row))
    Console().print(table)
    if result.truncated:
        err.print(f"truncated: {result.truncation_reason}")


def _print_verify(result: Any) -> None:
    console = Console()
    for c in result.chains:
        console.print(
            f"[green]ok[/] {c.chain}: {c.entries} entries, head seq {c.head_seq}, "
            f"{c.bodies_erased} bodies erased",
            highlight=False,
        )
    console.print(f"{len(result.chains)} chain(s) verified")


def main() -> None:
    app()


import mentis.cli_doctor  # noqa: E402  (registers `mentis doctor` and `mentis stats`)
import mentis.cli_hooks  # noqa: E402  (registers hook, task, context and stale on `app`)
import mentis.cli_install  # noqa: E402  (registers `mentis install`, `uninstall`, `instructions`)
import mentis.cli_migrate  # noqa: E402  (registers `mentis migrate` on `app`)
import mentis.cli_model  # noqa: E402  (registers `mentis model install`)
import mentis.cli_tokens  # noqa: E402, F401  (registers `mentis token` and `mentis tls`)
from mentis import cli_thoughts  # noqa: E402, F401  (registers the thought commands on `app`)
