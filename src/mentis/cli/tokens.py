"""``mentis token`` and ``mentis tls``: access to ``mentis serve --http``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from mentis.cli.common import DbOpt, JsonOpt, caller, emit, err, errors, settings
from mentis.service.access import Caller

commands = typer.Typer()

token_app = typer.Typer(
    name="token",
    help="Bearer tokens for `mentis serve --http`: create (printed once), list, revoke.",
    no_args_is_help=True,
)
commands.add_typer(token_app)
tls_app = typer.Typer(name="tls", help="TLS for `mentis serve --http`.", no_args_is_help=True)
commands.add_typer(tls_app)


@contextmanager
def _tokens(db: Path | None) -> Iterator[tuple[Any, Caller]]:
    """The token store, and the local user as the caller (an admin: ``mentis.service.token_admin``)."""
    from mentis.service.tokens import TokenStore

    config = settings(db)
    with errors(), closing(TokenStore.open(config)) as tokens:
        yield tokens, caller(config)


@token_app.command("create")
def token_create(
    repo: Annotated[
        list[str] | None,
        typer.Option(
            "--repo", "-r", help="Repository pattern it may use, e.g. 'github.com/acme/*' (repeatable)."
        ),
    ] = None,
    scope: Annotated[str, typer.Option(help="read, write or admin (admin: every repository).")] = "read",
    expires: Annotated[str | None, typer.Option(help="Lifetime, e.g. 30d, 12h, 2w (default: none).")] = None,
    agent: Annotated[str | None, typer.Option(help="Agent identity of its calls (default token-ID).")] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a bearer token and print it once; only a salted hash of it is stored."""
    from mentis.service.token_admin import create_token

    with _tokens(db) as (tokens, who):
        token, info = create_token(
            who, tokens, scope=scope, repositories=tuple(repo or ()), agent=agent, expires=expires
        )
    emit({"token": token, **info.to_json()}, as_json, lambda _: Console().print(token, highlight=False))
    err.print(
        f"token {info.id} ({info.scope}, agent {info.agent}): shown once, store it now.", highlight=False
    )


@token_app.command("list")
def token_list(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """List tokens (id, agent, scope, repositories, expiry, status), never the tokens themselves."""
    from mentis.service.token_admin import list_tokens

    with _tokens(db) as (tokens, who):
        listed = [t.to_json() for t in list_tokens(who, tokens)]
    emit({"tokens": listed}, as_json, _print_tokens)


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id, from `mentis token list`.")],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke a token: every request with it is refused from now on."""
    from mentis.service.token_admin import revoke_token

    with _tokens(db) as (tokens, who):
        info = revoke_token(who, tokens, token_id)
    emit(info.to_json(), as_json, lambda i: Console().print(f"revoked {i['id']}", highlight=False))


def _print_tokens(data: dict[str, Any]) -> None:
    table = Table("id", "agent", "scope", "repositories", "created", "expires", "status")
    for t in data["tokens"]:
        repos = ", ".join(t["repositories"])
        table.add_row(
            t["id"], t["agent"], t["scope"], repos, t["created_at"], t["expires_at"] or "-", t["status"]
        )
    Console().print(table)


@tls_app.command("self-signed")
def tls_self_signed(
    out: Annotated[
        Path | None,
        typer.Option(help="Directory for cert.pem and key.pem (default: tls/ next to the store)."),
    ] = None,
    host: Annotated[
        list[str] | None, typer.Option(help="Another name or IP to certify (repeatable).")
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing pair.")] = False,
    db: DbOpt = None,
) -> None:
    """Write a self-signed certificate and key (0600) for localhost, 127.0.0.1 and ::1."""
    from mentis.http.tls import self_signed

    with errors():
        cert, key = self_signed(out or settings(db).db_path.parent / "tls", tuple(host or ()), force=force)
    err.print(f"wrote {cert} and {key}; serve with:", highlight=False)
    err.print(f"  mentis serve --http --tls-cert {cert} --tls-key {key}", highlight=False, soft_wrap=True)
