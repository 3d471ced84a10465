"""``mentis serve``: the MCP server over stdio, or MCP, REST and the dashboard over HTTP."""

from __future__ import annotations

import logging
import sys
from contextlib import ExitStack, closing, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NamedTuple, NoReturn

import typer

from mentis.cli.common import DbOpt, err, errors, settings
from mentis.config import Settings
from mentis.errors import ConfigError
from mentis.mcp.remote_http import MAX_RESPONSE_MB, MiB
from mentis.service.memory import Memory
from mentis.service.profiles import ENV as PROFILE_ENV
from mentis.service.profiles import PROFILES, Profile, parse_profile

if TYPE_CHECKING:
    from mentis.http import HttpConfig
    from mentis.integrations.hooks.background import Slot

commands = typer.Typer()

INSTALL_HINT = "(`mentis install --help`; --dry-run prints the entry, --list names the harnesses)"


class HttpLimits(NamedTuple):
    """The connection limits given on the command line (None: HttpConfig's default)."""

    header_timeout_s: float | None
    max_connections: int | None
    idle_exit_s: float | None


class Inherited(NamedTuple):
    """The lock and listening socket a hook handed to the background server it started."""

    lock_fd: int
    socket_fd: int


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
            help="With --http: where to listen (default 127.0.0.1:9471), or unix:PATH for a unix "
            "socket (mode 0600) that serves the local user without tokens.",
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
    idle_exit: Annotated[
        float | None,
        typer.Option(
            min=1,
            help="With --http: exit after this many seconds without an open connection (the hooks' "
            "background server does).",
        ),
    ] = None,
    lock_fd: Annotated[int | None, typer.Option(hidden=True)] = None,
    socket_fd: Annotated[int | None, typer.Option(hidden=True)] = None,
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
    no_webhooks: Annotated[
        bool, typer.Option("--no-webhooks", help="With --http: do not deliver webhooks from this server.")
    ] = False,
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
    http_only = (
        bind
        or no_auth
        or tls_cert
        or tls_key
        or allow_host
        or header_timeout
        or max_connections
        or idle_exit
        or no_webhooks
    )
    if token is not None:
        _refuse("--token is refused: other users can read a command line; use --token-file or MENTIS_TOKEN")
    elif remote is not None:
        if http or http_only or db:
            _refuse("--remote serves stdio; it takes no --http, HOST:PORT, --db or TLS options")
        _serve_remote(config, remote, token_file, ca_file, timeout, max_response_mb, profile)
    elif token_file or ca_file:
        _refuse("--token-file and --ca-file need --remote")
    elif (lock_fd is None) != (socket_fd is None) or (
        lock_fd is not None and not (http and (bind or "").startswith("unix:"))
    ):
        _refuse("--lock-fd and --socket-fd go together, with --http unix:PATH")
    elif http:
        limits = HttpLimits(header_timeout, max_connections, idle_exit)
        inherited = None if lock_fd is None or socket_fd is None else Inherited(lock_fd, socket_fd)
        hosts = tuple(allow_host or ())
        args = (tls_cert, tls_key, hosts, limits, inherited, profile)
        _serve_http(config, bind or "", no_auth, *args, webhooks=not no_webhooks)
    elif http_only:
        _refuse(
            "HOST:PORT, --no-auth, --tls-cert, --tls-key, --allow-host, --header-timeout, "
            "--max-connections, --idle-exit and --no-webhooks need --http"
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
    inherited: Inherited | None,
    profile: Profile,
    *,
    webhooks: bool = True,
) -> None:
    from mentis.http import HttpConfig, build_app, listen, parse_bind, server
    from mentis.http.connections import raise_fd_limit
    from mentis.service.tokens import ADMIN_TOKEN_FILE, TokenStore, bootstrap_admin
    from mentis.service.webhook_rules import WebhookSettings
    from mentis.service.webhooks import WebhookWorker

    with ExitStack() as stack, errors():
        unix = Path(bind.removeprefix("unix:")).absolute() if bind.startswith("unix:") else None
        host, port = parse_bind("" if unix else bind)
        http = HttpConfig(
            host=host,
            port=port,
            auth=not no_auth and unix is None,
            allowed_hosts=allow_hosts,
            tls_cert=tls_cert,
            tls_key=tls_key,
            unix_socket=unix,
            **{k: v for k, v in limits._asdict().items() if v is not None},
        )
        slot = None if unix is None else _unix_slot(unix, inherited)  # clients queue on it meanwhile
        if slot is not None and unix is not None:
            stack.callback(_release, slot, unix)
        raise_fd_limit()  # before the store opens its files; the connection cap fits under it
        tokens = stack.enter_context(closing(TokenStore.open(config))) if http.auth else None
        admin_file = config.db_path.parent / ADMIN_TOKEN_FILE
        created = tokens is not None and bootstrap_admin(tokens, admin_file)
        memory = stack.enter_context(closing(Memory.open(config)))
        memory.warm_up()
        if webhooks:  # the outbox's deliveries, stopped before the store closes
            hook_tokens = stack.enter_context(closing(TokenStore.open(config)))
            stack.callback(WebhookWorker(memory.store, hook_tokens, WebhookSettings.of(config)).start().stop)
        if slot is not None:
            sock, lines = slot.sock, _unix_banner(config, http)
        else:
            sock = stack.enter_context(closing(listen(http)))
            name = sock.getsockname()
            url = f"{http.scheme}://{'[' + name[0] + ']' if ':' in name[0] else name[0]}:{name[1]}"
            lines = _http_banner(config, url, tokens is not None, admin_file, created)
        for line in lines:
            err.print(line, highlight=False, soft_wrap=True, markup=False)
        server(build_app(memory, tokens, http, profile=profile), http).run(sockets=[sock])


def _unix_slot(path: Path, inherited: Inherited | None) -> Slot:
    """The lock beside ``path`` and a socket listening on it: handed down by the hook that
    started this server, else taken here (refused while another server holds the lock)."""
    from mentis.integrations.hooks.background import Slot, claim, lock_path

    if inherited is not None:
        return Slot.adopt(inherited.lock_fd, inherited.socket_fd)
    slot = claim(path)
    if slot is None:
        raise ConfigError(f"another mentis server serves {path} (it holds {lock_path(path)}); stop it first")
    return slot


def _release(slot: Slot, path: Path) -> None:
    """Remove the socket file and close the listening socket; the lock stays held until this
    process has ended (the kernel drops it then), so the next server starts only once this one
    is gone, never beside it while it shuts down."""
    with suppress(FileNotFoundError):
        path.unlink()
    slot.sock.close()


def _unix_banner(config: Settings, http: HttpConfig) -> list[str]:
    idle = f"; exits after {http.idle_exit_s:g} s without a connection" if http.idle_exit_s else ""
    return [
        f"mentis: serving HTTP on unix:{http.unix_socket} for the local user (no token: the socket's "
        f"mode 0600 admits only you; REST /v1, MCP /mcp); store {config.db_path} verified{idle}."
    ]


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
