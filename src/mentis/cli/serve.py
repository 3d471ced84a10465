"""``mentis serve``: the MCP server over stdio, or MCP, REST and the dashboard over HTTP."""

from __future__ import annotations

import logging
import sys
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Annotated, NamedTuple, NoReturn

import typer

from mentis.cli.common import DbOpt, err, errors, settings
from mentis.config import Settings
from mentis.mcp.remote_http import MAX_RESPONSE_MB, MiB
from mentis.service.memory import Memory
from mentis.service.profiles import ENV as PROFILE_ENV
from mentis.service.profiles import PROFILES, Profile, parse_profile

commands = typer.Typer()

INSTALL_HINT = "(`mentis install --help`; --dry-run prints the entry, --list names the harnesses)"


class HttpLimits(NamedTuple):
    """The connection limits given on the command line (None: HttpConfig's default)."""

    header_timeout_s: float | None
    max_connections: int | None


@commands.command()
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
    header_timeout: Annotated[
        float | None,
        typer.Option(
            min=0.1,
            max=3600,
            show_default="10",
            help="With --http: seconds a connection has to send its request head; then it is closed.",
        ),
    ] = None,
    max_connections: Annotated[
        int | None,
        typer.Option(
            min=16,
            show_default="1000",
            help="With --http: open connections at most (kept below the open-files limit); beyond it "
            "the connection longest waiting for its request head is closed.",
        ),
    ] = None,
    remote: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Serve stdio by forwarding every tool to the Mentis at URL (https://host/mcp); "
            "signs writes with MENTIS_SIGNING_KEY when set.",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(help="With --remote: the file holding the bearer token (else $MENTIS_TOKEN)."),
    ] = None,
    ca_file: Annotated[
        Path | None, typer.Option(help="With --remote: PEM CA certificates to trust for the server's TLS.")
    ] = None,
    timeout: Annotated[
        float, typer.Option(min=1, max=3600, help="With --remote: seconds one forwarded call may take.")
    ] = 120.0,
    max_response_mb: Annotated[
        int,
        typer.Option(min=1, max=4096, help="With --remote: the most it reads of one answer, in MiB."),
    ] = MAX_RESPONSE_MB,
    tools: Annotated[
        str | None,
        typer.Option(
            "--tools",
            envvar=PROFILE_ENV,
            metavar="PROFILE[,PROFILE…]",
            help=f"The MCP tools to offer: {', '.join(PROFILES)} (default: default; docs/tools.md).",
            show_default=False,
        ),
    ] = None,
    token: Annotated[str | None, typer.Option(hidden=True)] = None,
) -> None:
    """Run the MCP server over stdio (what coding-agent harnesses launch), or over HTTP with --http.

    The store is opened and verified first; a store that does not verify is refused. Over HTTP every
    route but /health needs a bearer token (`mentis token create`); on a store without tokens a
    first admin token is written to admin.token next to the store (mode 0600). With --remote URL it
    opens no store: it serves stdio by forwarding every tool to the Mentis at URL.
    """
    from mentis.index.malloc import tune_for_server

    tune_for_server()  # before the preload thread and the model allocate
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    with errors():
        profile = parse_profile(tools)
    config = settings(db)
    http_only = bind or no_auth or tls_cert or tls_key or allow_host or header_timeout or max_connections
    if token is not None:
        _refuse("--token is refused: other users can read a command line; use --token-file or MENTIS_TOKEN")
    elif remote is not None:
        if http or http_only or db:
            _refuse("--remote serves stdio; it takes no --http, HOST:PORT, --db or TLS options")
        _serve_remote(config, remote, token_file, ca_file, timeout, max_response_mb, profile)
    elif token_file or ca_file:
        _refuse("--token-file and --ca-file need --remote")
    elif http:
        limits = HttpLimits(header_timeout, max_connections)
        _serve_http(config, bind or "", no_auth, tls_cert, tls_key, tuple(allow_host or ()), limits, profile)
    elif http_only:
        _refuse(
            "HOST:PORT, --no-auth, --tls-cert, --tls-key, --allow-host, --header-timeout and "
            "--max-connections need --http"
        )
    else:
        _serve_stdio(config, profile)


def _refuse(message: str) -> NoReturn:
    """Options that do not go together: a line on stderr and exit code 2, as for any usage error."""
    err.print(f"error: {message}", highlight=False)
    raise typer.Exit(2)


def _serve_stdio(config: Settings, profile: Profile) -> None:
    import anyio

    from mentis.mcp.server import build_server
    from mentis.mcp.stdio import run_stdio

    with errors():
        memory = Memory.open(config)
    memory.warm_up()
    err.print(
        f"mentis: serving MCP on stdio ({len(profile.names)} tools, profile {profile.spec}); "
        f"store {config.db_path} verified.",
        highlight=False,
    )
    err.print(
        f"harness config: mentis install HARNESS writes it {INSTALL_HINT}", highlight=False, soft_wrap=True
    )
    try:
        anyio.run(run_stdio, build_server(memory, profile))
    finally:
        memory.close()


def _serve_remote(
    config: Settings,
    url: str,
    token_file: Path | None,
    ca_file: Path | None,
    timeout: float,
    max_mb: int,
    profile: Profile,
) -> None:
    import anyio

    from mentis.mcp import remote
    from mentis.mcp.remote_link import Remote, RemoteConfig, check_url, read_token

    with errors():
        url = check_url(url)
        token = read_token(token_file)
        target = RemoteConfig(url, token, ca_file, call_timeout_s=timeout, max_response_bytes=max_mb * MiB)
        key = config.signing_key

        def ready(found: Remote) -> None:
            signs = f"; signing writes with {key}" if key else ""
            err.print(
                f"mentis: serving MCP on stdio, forwarding {len(found.tools)} tools to {url}{signs}.",
                highlight=False,
                soft_wrap=True,
                markup=False,
            )

        anyio.run(
            lambda: remote.serve(
                target, signing_key=key, agent_id=config.agent_id, ready=ready, profile=profile
            )
        )


def _serve_http(
    config: Settings,
    bind: str,
    no_auth: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
    allow_hosts: tuple[str, ...],
    limits: HttpLimits,
    profile: Profile,
) -> None:
    from mentis.http import HttpConfig, build_app, listen, parse_bind, server
    from mentis.http.connections import raise_fd_limit
    from mentis.service.tokens import ADMIN_TOKEN_FILE, TokenStore, bootstrap_admin

    with ExitStack() as stack, errors():
        host, port = parse_bind(bind)
        http = HttpConfig(
            host=host,
            port=port,
            auth=not no_auth,
            allowed_hosts=allow_hosts,
            tls_cert=tls_cert,
            tls_key=tls_key,
            **{k: v for k, v in limits._asdict().items() if v is not None},
        )
        raise_fd_limit()  # before the store opens its files; the connection cap fits under it
        tokens = None if no_auth else stack.enter_context(closing(TokenStore.open(config)))
        admin_file = config.db_path.parent / ADMIN_TOKEN_FILE
        created = tokens is not None and bootstrap_admin(tokens, admin_file)
        memory = stack.enter_context(closing(Memory.open(config)))
        memory.warm_up()
        sock = stack.enter_context(closing(listen(http)))
        name = sock.getsockname()
        url = f"{http.scheme}://{'[' + name[0] + ']' if ':' in name[0] else name[0]}:{name[1]}"
        for line in _http_banner(config, url, tokens is not None, admin_file, created):
            err.print(line, highlight=False, soft_wrap=True, markup=False)
        server(build_app(memory, tokens, http, profile=profile), http).run(sockets=[sock])


def _http_banner(config: Settings, url: str, auth: bool, admin_file: Path, created: bool) -> list[str]:
    lines = [
        f"mentis: serving HTTP on {url} (MCP {url}/mcp, REST {url}/v1, OpenAPI {url}/v1/openapi.json, "
        f"dashboard {url}/dashboard); "
        f"store {config.db_path} verified."
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
    token = " --token-file TOKEN_FILE" if auth else ""
    lines.append(f"harness config: mentis install HARNESS --http {url}/mcp{token} {INSTALL_HINT}")
    return lines
