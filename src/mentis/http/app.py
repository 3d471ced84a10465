"""The ASGI app of ``mentis serve --http``: ``/mcp``, ``/v1/<operation>``, ``/v1/openapi.json``, ``/health``.

``/mcp`` is the official SDK's streamable HTTP transport (stateless, JSON responses) over the same
tools as stdio; ``/v1`` is the REST mirror (:mod:`mentis.http.rest`). Both are generated from
:data:`mentis.service.operations.OPERATIONS` when the app is built, so a new operation appears on both.
One :class:`~mentis.service.memory.Memory`, opened and verified before serving, is shared by every request;
operations run in worker threads so SQLite never blocks the event loop. ``/dashboard`` is the web
dashboard (:mod:`mentis.dashboard`), signed in with the same tokens.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mentis.dashboard import build_dashboard
from mentis.errors import ConfigError
from mentis.http.connections import (
    ACCEPT_BATCH,
    LISTEN_BACKLOG,
    MIN_CONNECTIONS,
    ConnectionGuard,
    GuardedServer,
    connection_cap,
    fd_limit,
    guarded_h11,
)
from mentis.http.middleware import (
    PER_CALLER,
    Authenticate,
    BodyLimit,
    CallerLimit,
    CallerLimits,
    HostGuard,
    LocalUser,
    RateLimit,
    Timeout,
    TokenBucket,
)
from mentis.http.rest import OTHER_ERRORS, endpoint, error_response, openapi
from mentis.mcp.server import build_server
from mentis.service.access import resolve_caller
from mentis.service.memory import Caller, Memory
from mentis.service.operations import OPERATIONS
from mentis.service.profiles import Profile, parse_profile
from mentis.service.tokens import CALLER_SCOPE_KEY, TokenStore
from mentis.version import __version__

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9471
DEFAULT_BIND = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_bind(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT``, ``HOST`` or ``:PORT`` → (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else rest
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    host = host or DEFAULT_HOST
    try:
        port = int(port_text) if port_text else DEFAULT_PORT
    except ValueError:
        port = -1
    if not 0 <= port <= 65535 or not host:
        raise ConfigError(f"--http {text!r}: expected HOST:PORT, e.g. {DEFAULT_BIND} or [::1]:9471")
    return host, port


@dataclass(frozen=True)
class HttpConfig:
    """How the HTTP server listens and what it allows. Defaults are the documented ones."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    auth: bool = True
    allowed_hosts: tuple[str, ...] = ()
    max_body_bytes: int = 1024 * 1024
    rate_per_second: float = 20.0
    rate_burst: int = 60
    request_timeout_s: float = 30.0
    header_timeout_s: float = 10.0
    """Seconds a connection has to send a request head once it is ready for one."""
    keep_alive_s: int = 5
    """Seconds an idle connection is kept open after a response."""
    max_connections: int = 1000
    """Open connections at most (lowered to fit the open-files limit)."""
    max_header_bytes: int = 16 * 1024
    tls_cert: Path | None = None
    tls_key: Path | None = None
    session_secret: bytes | None = None  # dashboard cookies; None: a random secret per process
    session_ttl_s: int = 12 * 3600
    token_concurrency: int = PER_CALLER  # requests of one token served at once; the rest wait
    unix_socket: Path | None = None
    """Served on this unix socket instead of HOST:PORT. Its mode (0600) admits only this user, so
    every request is the local user's, as on stdio: no token, no rate limit, no Host to check."""
    idle_exit_s: float | None = None
    """Exit once no connection has been open for this many seconds (None: never)."""

    def __post_init__(self) -> None:
        if self.unix_socket is not None and (self.auth or self.tls_cert or self.allowed_hosts):
            raise ConfigError(
                "a unix socket serves the local user: it takes no token (--no-auth is implied), "
                "--tls-cert or --allow-host"
            )
        if self.idle_exit_s is not None and not self.idle_exit_s > 0:
            raise ConfigError("--idle-exit must be a positive number of seconds")
        if not self.auth and self.unix_socket is None and not is_loopback(self.host):
            raise ConfigError(
                f"--no-auth is only allowed on a loopback address (127.0.0.1, ::1, localhost), not "
                f"{self.host!r}; create a token with `mentis token create` instead"
            )
        if not 0 < self.header_timeout_s <= 3600 or not 0 < self.request_timeout_s <= 3600:
            raise ConfigError("--header-timeout and the request timeout must be from 0 to 3600 seconds")
        if self.max_connections < MIN_CONNECTIONS:
            raise ConfigError(f"--max-connections must be at least {MIN_CONNECTIONS}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("give both --tls-cert and --tls-key (or neither)")
        for path in (self.tls_cert, self.tls_key):
            if path is not None and not path.is_file():
                raise ConfigError(f"{path} is not a file; `mentis tls self-signed` writes a pair")

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"

    @property
    def local(self) -> bool:
        """Served on a unix socket, to the local user only."""
        return self.unix_socket is not None

    def hosts(self) -> tuple[str, ...]:
        """Host names the Host and Origin headers may carry."""
        names = [*LOOPBACK_NAMES, *self.allowed_hosts]
        if self.host not in ("0.0.0.0", "::"):
            names.append(self.host)
        else:  # a wildcard bind also answers to this machine's names
            names += [socket.gethostname(), socket.getfqdn()]
        return tuple(dict.fromkeys(n.lower() for n in names))


def _health(_: Request) -> Response:
    return Response(b'{"status":"ok","version":"%s"}' % __version__.encode(), media_type="application/json")


def _local_health(memory: Memory) -> Callable[[Request], Awaitable[Response]]:
    """``/health`` on a unix socket also names the process and the store it opened, so a hook can
    tell a server of another version, or of a store file since replaced, and stop it
    (:mod:`mentis.integrations.hooks.background`)."""
    answer = {"status": "ok", "version": __version__, "pid": os.getpid()}
    body = orjson.dumps({**answer, "store": memory.settings.store_identity()})

    async def health(_: Request) -> Response:
        return Response(body, media_type="application/json")

    return health


async def _http_error(_: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    headers = exc.headers if isinstance(exc, HTTPException) else None
    code, message = OTHER_ERRORS.get(status, ("http_error", "request failed"))
    if status == 404:
        message = "no such route; the REST operations are listed in /v1/openapi.json, MCP is at /mcp"
    return error_response(status, code, message, headers=headers)


class ByCaller:
    """``/mcp``: the admin callers' MCP server for an admin caller, the other one for the rest."""

    def __init__(self, admin: MCPServer[Memory], user: MCPServer[Memory]) -> None:
        self.admin = StreamableHTTPASGIApp(admin.session_manager)
        self.user = StreamableHTTPASGIApp(user.session_manager)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller = scope.get(CALLER_SCOPE_KEY)
        admin = isinstance(caller, Caller) and caller.admin
        await (self.admin if admin else self.user)(scope, receive, send)


@functools.cache
def _openapi_json() -> bytes:
    """``/v1/openapi.json``: the same document for every app of this process, so generated once."""
    return orjson.dumps(openapi(OPERATIONS))


def build_app(
    memory: Memory,
    tokens: TokenStore | None,
    config: HttpConfig,
    *,
    limits: CallerLimits | None = None,
    profile: Profile | None = None,
) -> ASGIApp:
    """The whole HTTP surface over an already opened ``memory``.

    ``tokens`` authenticates requests; it must be given unless ``config.auth`` is False. ``limits``
    counts each caller's requests in progress (default: ``config.token_concurrency`` per caller).
    ``profile`` is the MCP tool profile (default: ``default``); REST and the dashboard offer every
    operation.
    """
    if config.auth and tokens is None:
        raise ConfigError("HTTP auth is on but no token store was given")
    served = profile or parse_profile(None)
    # One MCP server for admin callers and one without the admin tools for every other caller, so a
    # non-admin token neither sees them in tools/list nor can call them (an unknown tool).
    admin_mcp, user_mcp = (build_server(memory, served.for_caller(admin=a)) for a in (True, False))
    for mcp in (admin_mcp, user_mcp):
        # DNS-rebinding checks are HostGuard's, for every route; the SDK's copy is switched off.
        mcp.streamable_http_app(
            stateless_http=True,
            json_response=True,
            max_request_body_size=config.max_body_bytes,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
    document = _openapi_json()

    def _openapi(_: Request) -> Response:
        return Response(document, media_type="application/json")

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with admin_mcp.session_manager.run(), user_mcp.session_manager.run():
            yield

    default = "local-user" if config.local else "http-anonymous"
    anonymous = None if config.auth else resolve_caller(memory.settings, default=default)
    dashboard = build_dashboard(
        memory,
        tokens if config.auth else None,
        anonymous=anonymous,
        secure=config.tls_cert is not None,
        secret=config.session_secret,
        ttl_s=config.session_ttl_s,
    )
    routes = [
        Route("/health", _local_health(memory) if config.local else _health, methods=["GET"]),
        Mount("/dashboard", dashboard),
        Route("/mcp", ByCaller(admin_mcp, user_mcp)),
        Route("/v1/openapi.json", _openapi, methods=["GET"]),
        *(Route(f"/v1/{op.name}", endpoint(op, memory), methods=["POST"]) for op in OPERATIONS),
    ]
    app: ASGIApp = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _http_error},
    )
    app = CallerLimit(app, limits or CallerLimits(config.token_concurrency))
    app = BodyLimit(app, config.max_body_bytes)
    app = Timeout(app, config.request_timeout_s)
    if config.local:  # browsers cannot reach a unix socket: no DNS rebinding to guard against
        return LocalUser(app, memory.settings, default)
    app = RateLimit(app, TokenBucket(config.rate_per_second, config.rate_burst))
    app = Authenticate(app, tokens if config.auth else None, anonymous)
    return HostGuard(app, config.hosts())


def listen(config: HttpConfig) -> socket.socket:
    """A listening socket on ``config.host:config.port`` (port 0 picks a free one)."""
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    # proto=IPPROTO_TCP so asyncio sets TCP_NODELAY on accepted connections (else Nagle adds ~40 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((config.host, config.port))
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    sock.setblocking(False)
    return sock


def server(app: ASGIApp, config: HttpConfig, **uvicorn_options: Any) -> uvicorn.Server:
    """A uvicorn server for ``app`` (run it with ``.run(sockets=[listen(config)])``), under the
    connection limits of :mod:`mentis.http.connections`: its cap is ``config.max_connections``
    lowered to fit the open-files limit in force now."""
    limit = fd_limit()
    cap = connection_cap(config.max_connections, limit)
    if cap < config.max_connections:
        log.warning(
            "serving at most %d connections, not %d: the open-files limit is %d (raise `ulimit -n`)",
            cap,
            config.max_connections,
            limit,
        )
    guard = ConnectionGuard(cap, config.header_timeout_s, config.request_timeout_s)
    options: dict[str, Any] = {
        "log_level": "warning",
        "lifespan": "on",
        "ws": "none",
        "http": guarded_h11(guard),
        "backlog": ACCEPT_BATCH,
        "timeout_keep_alive": config.keep_alive_s,
        "h11_max_incomplete_event_size": config.max_header_bytes,
        "server_header": False,
        "timeout_graceful_shutdown": 5,
    }
    options.update(uvicorn_options)
    if config.tls_cert is not None:
        options.update(ssl_certfile=str(config.tls_cert), ssl_keyfile=str(config.tls_key))
    return GuardedServer(uvicorn.Config(app, **options), guard, config.idle_exit_s)
