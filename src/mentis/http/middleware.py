"""Pure ASGI middleware: host checks, authentication, rate limits, timeouts, body limits and each
caller's share of the worker threads.

Order (outermost first): :class:`HostGuard` → :class:`Authenticate` → :class:`RateLimit` →
:class:`Timeout` → :class:`BodyLimit` → :class:`CallerLimit` → the routes; on a unix socket
:class:`LocalUser` → :class:`Timeout` → … instead. They only check and
attach; authorisation (what a caller may read or write) happens in ``memory.py``, from the
:class:`~mentis.service.memory.Caller` that :class:`Authenticate` puts under ``scope["mentis.caller"]``.

Operations run in worker threads of anyio's default limiter (40 at once), which every request
shares, so no one caller may fill it: :class:`CallerLimit` lets at most ``per_caller`` requests of
one token (or one dashboard client) in at a time and keeps the others waiting on the event loop,
where they hold no thread; and :class:`Authenticate` looks tokens up on a small limiter of its own,
so a request is identified even while every worker thread is busy (security issue 24: 40 slow
uploads from one token used to hold every thread and another team's search waited ~60 s).
"""

from __future__ import annotations

import ipaddress
import math
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

import anyio
import anyio.to_thread
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mentis.config import Settings
from mentis.errors import ConfigError, InvalidInput, RegistryError
from mentis.http.rest import error_response
from mentis.ledger.registry import check_agent_id
from mentis.service.access import resolve_caller
from mentis.service.memory import Caller
from mentis.service.tokens import CALLER_SCOPE_KEY, TokenStore

TOKEN_ID_KEY = "mentis.token_id"
AGENT_HEADER = "X-Mentis-Agent"
SESSION_HEADER = "X-Mentis-Session"
"""The session a request belongs to (session-private records: docs/scopes.md), on any transport."""
"""The agent a local user's client calls for, over a unix socket (:class:`LocalUser`)."""
PUBLIC_PATHS = frozenset({"/health"})
LOOKUP_THREADS = 4
"""Token lookups running at once, on their own limiter (the PostgreSQL token table's pool is as
large, ``postgres_tokens.POOL_SIZE``)."""
PER_CALLER = 4
"""Requests of one token served at once by default (``HttpConfig.token_concurrency``): a tenth of
the 40 worker threads and half the PostgreSQL store's 8 pooled connections."""
DASHBOARD = "/dashboard"
"""Signs people in with a session cookie itself (:mod:`mentis.dashboard`), so no bearer token here."""


STATIC = DASHBOARD + "/static/"


def _dashboard(path: str) -> bool:
    return path == DASHBOARD or path.startswith(DASHBOARD + "/")


_AUTHORITY = re.compile(
    r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?))(?::(?P<port>[0-9]{1,5}))?",
    re.IGNORECASE,
)
_ORIGIN = re.compile(r"(?P<scheme>https?)://(?P<authority>[^/?#@\s]+)", re.IGNORECASE)
DEFAULT_PORTS = {"http": 80, "https": 443}


def parse_authority(text: str) -> tuple[str, int | None] | None:
    """``host[:port]`` exactly (a name, an IPv4 address or a bracketed IPv6 one) → ``(host, port)``
    with the host in lower case (IPv6 compressed); anything else (user info, a path, spaces, a
    bad port) → None. ``localhost:80@evil.com`` is not an authority."""
    m = _AUTHORITY.fullmatch(text)
    if m is None:
        return None
    port = None if m["port"] is None else int(m["port"])
    if port is not None and not 0 < port < 65536:
        return None
    if m["v6"] is not None:
        try:
            return ipaddress.IPv6Address(m["v6"]).compressed, port
        except ValueError:
            return None
    return m["name"].lower(), port


def allowed_name(entry: str) -> tuple[str, int | None]:
    """An allowed-host entry (``name``, ``name:port``, ``::1``, ``[::1]:port``) → ``(host, port)``;
    a port of None means the port the request came in on."""
    if entry.count(":") > 1 and not entry.startswith("["):
        entry = f"[{entry}]"
    parsed = parse_authority(entry.strip())
    if parsed is None:
        raise ConfigError(f"--allow-host {entry!r} is not a host name or NAME:PORT")
    return parsed


class HostGuard:
    """DNS-rebinding protection. The Host header must be exactly ``host[:port]`` naming an
    allowed host on the port the request came in on (no port: the scheme's default), else 421.
    An Origin header, when present, must be ``scheme://host[:port]`` with the scheme, host and
    port the request was served on (or an allowed ``NAME:PORT``), else 403."""

    def __init__(self, app: ASGIApp, allowed: Collection[str]) -> None:
        self.app = app
        self.allowed = frozenset(allowed_name(h) for h in allowed)

    def _admits(self, host: str, port: int, served_port: int | None) -> bool:
        return (host, port) in self.allowed or ((host, None) in self.allowed and port == served_port)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        served_scheme = str(scope.get("scheme") or "http")
        scheme = {"ws": "http", "wss": "https"}.get(served_scheme, served_scheme)
        server = scope.get("server")
        served_port = server[1] if server else None
        raw_host = headers.get("host", "")
        host = parse_authority(raw_host)
        if host is None or not self._admits(host[0], host[1] or DEFAULT_PORTS.get(scheme, 0), served_port):
            names = sorted(f"{h}:{p or served_port}" for h, p in self.allowed)
            response = error_response(
                421,
                "misdirected",
                f"Host {raw_host!r} is not served here; allowed: {', '.join(names)} "
                "(add one with --allow-host NAME or NAME:PORT)",
            )
            await response(scope, receive, send)
            return
        origin = headers.get("origin")
        if origin is not None and not self._origin_ok(origin, scheme, served_port):
            response = error_response(
                403,
                "forbidden_origin",
                f"Origin {origin!r} is not allowed: it must be {scheme}://HOST:PORT of this server",
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _origin_ok(self, origin: str, scheme: str, served_port: int | None) -> bool:
        m = _ORIGIN.fullmatch(origin)
        if m is None or m["scheme"].lower() != scheme:
            return False
        parsed = parse_authority(m["authority"])
        if parsed is None:
            return False
        return self._admits(parsed[0], parsed[1] or DEFAULT_PORTS[scheme], served_port)


class Authenticate:
    """Attach the Caller of the request's bearer token; 401 without a valid one (but /health).

    With ``tokens=None`` (``--no-auth``, loopback only) every request gets ``anonymous``.
    """

    def __init__(self, app: ASGIApp, tokens: TokenStore | None, anonymous: Caller | None = None) -> None:
        if tokens is None and anonymous is None:
            raise ValueError("Authenticate needs a token store, or an anonymous caller for --no-auth")
        self.app = app
        self.tokens = tokens
        self.anonymous = anonymous
        self.lookups = anyio.CapacityLimiter(LOOKUP_THREADS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS or _dashboard(scope["path"]):
            await self.app(scope, receive, send)
            return
        if self.tokens is None:
            assert self.anonymous is not None  # __init__ requires one or the other
            await _with_session(self.app, self.anonymous, scope, receive, send)
            return
        scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            await self._refuse(
                scope, receive, send, "send Authorization: Bearer <token> (`mentis token create`)"
            )
            return
        info = await anyio.to_thread.run_sync(self.tokens.lookup, token, limiter=self.lookups)
        problem = "the token is not valid" if info is None else None
        if info is not None and info.status() != "active":
            problem = f"the token {info.id} is {info.status()}; create a new one with `mentis token create`"
        if problem is not None or info is None:
            await self._refuse(scope, receive, send, problem or "", invalid=True)
            return
        scope[TOKEN_ID_KEY] = info.id
        await _with_session(self.app, info.caller(), scope, receive, send)

    @staticmethod
    async def _refuse(
        scope: Scope, receive: Receive, send: Send, message: str, invalid: bool = False
    ) -> None:
        challenge = 'Bearer realm="mentis"' + (', error="invalid_token"' if invalid else "")
        response = error_response(401, "unauthorized", message, headers={"WWW-Authenticate": challenge})
        await response(scope, receive, send)


class LocalUser:
    """Every request over a unix socket is the local user's (the socket's mode 0600 admits only
    the user who may open the store file anyway), as on stdio: unscoped and an admin. Its agent
    is the server's ``MENTIS_AGENT_ID``, else the one the client names in ``X-Mentis-Agent`` (a
    hook sends its harness's), else ``default``."""

    def __init__(self, app: ASGIApp, settings: Settings, default: str) -> None:
        self.app = app
        self.settings = settings
        self.default = default

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        name = Headers(scope=scope).get(AGENT_HEADER)
        if name is not None:
            try:
                check_agent_id(name, AGENT_HEADER)
            except RegistryError as exc:
                await error_response(422, InvalidInput.code, str(exc), field=AGENT_HEADER)(
                    scope, receive, send
                )
                return
        caller = resolve_caller(self.settings, client_name=name, default=self.default)
        await _with_session(self.app, caller, scope, receive, send)


async def _with_session(app: ASGIApp, caller: Caller, scope: Scope, receive: Receive, send: Send) -> None:
    """Attach ``caller``, in the session its request names in ``X-Mentis-Session`` (if any: 422
    naming the header when it is not an identifier), and go on."""
    session = Headers(scope=scope).get(SESSION_HEADER)
    if session is not None:
        try:
            check_agent_id(session, SESSION_HEADER)
        except RegistryError as exc:
            await error_response(422, InvalidInput.code, str(exc), field=SESSION_HEADER)(scope, receive, send)
            return
        caller = replace(caller, session_id=session)
    scope[CALLER_SCOPE_KEY] = caller
    await app(scope, receive, send)


@dataclass
class TokenBucket:
    """``rate`` requests a second per key, in bursts of up to ``burst``."""

    rate: float
    burst: float
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, key: str) -> float:
        """0 when a request may go ahead (and counts it), else the seconds to wait."""
        with self._lock:
            now = self.clock()
            level, last = self._buckets.get(key, (self.burst, now))
            level = min(self.burst, level + (now - last) * self.rate)
            if level >= 1:
                self._buckets[key] = (level - 1, now)
                return 0.0
            self._buckets[key] = (level, now)
            return (1 - level) / self.rate


def caller_key(scope: Scope) -> str:
    """Whose request this is, for per-caller limits: the token's id, or one key per dashboard
    client (signed in by cookie inside the dashboard)."""
    if _dashboard(scope["path"]):
        return f"dashboard:{(scope.get('client') or ('?', 0))[0]}"
    return str(scope.get(TOKEN_ID_KEY, "anonymous"))


class RateLimit:
    """Per-token rate limit: 429 with Retry-After when a token's bucket is empty."""

    def __init__(self, app: ASGIApp, bucket: TokenBucket) -> None:
        self.app = app
        self.bucket = bucket

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS or scope["path"].startswith(STATIC):
            await self.app(scope, receive, send)
            return
        wait = self.bucket.take(caller_key(scope))
        if wait > 0:
            retry = max(1, math.ceil(wait))
            response = error_response(
                429,
                "rate_limited",
                f"too many requests for this token; retry in {retry} s",
                headers={"Retry-After": str(retry)},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class Timeout:
    """504 when a request is not answered within ``seconds``.

    The operation's worker thread is abandoned, not killed: a write that timed out may still land.
    """

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        with anyio.move_on_after(self.seconds) as deadline:
            await self.app(scope, receive, watch)
        if deadline.cancelled_caught and not started:
            response = error_response(504, "timeout", f"no answer within {self.seconds:g} s; try again")
            await response(scope, receive, send)


class BodyLimit:
    """413 for a request body over ``max_bytes`` (declared or streamed); the body is read once."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = error_response(
            413, "body_too_large", f"the request body is over the limit of {self.max_bytes:,} bytes"
        )
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await too_large(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await too_large(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)


class CallerLimits:
    """At most ``per_caller`` requests in progress per caller key; the rest wait their turn in
    arrival order. A key's limiter is dropped once nothing holds or awaits it."""

    def __init__(self, per_caller: int = PER_CALLER) -> None:
        if per_caller < 1:
            raise ConfigError(f"token concurrency must be at least 1, not {per_caller}")
        self.per_caller = per_caller
        self._limiters: dict[str, anyio.CapacityLimiter] = {}

    @asynccontextmanager
    async def slot(self, key: str) -> AsyncIterator[None]:
        limiter = self._limiters.get(key)
        if limiter is None:
            limiter = self._limiters[key] = anyio.CapacityLimiter(self.per_caller)
        try:
            async with limiter:
                yield
        finally:
            if self._limiters.get(key) is limiter and not self._busy(limiter):
                del self._limiters[key]

    @staticmethod
    def _busy(limiter: anyio.CapacityLimiter) -> bool:
        stats = limiter.statistics()
        return stats.borrowed_tokens > 0 or stats.tasks_waiting > 0

    def running(self, key: str) -> int:
        """Requests of ``key`` in progress now."""
        limiter = self._limiters.get(key)
        return 0 if limiter is None else int(limiter.borrowed_tokens)

    def waiting(self, key: str) -> int:
        """Requests of ``key`` waiting for their turn."""
        limiter = self._limiters.get(key)
        return 0 if limiter is None else limiter.statistics().tasks_waiting


class CallerLimit:
    """Serve at most ``limits.per_caller`` requests of one caller at a time (see the module)."""

    def __init__(self, app: ASGIApp, limits: CallerLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS or scope["path"].startswith(STATIC):
            await self.app(scope, receive, send)
            return
        async with self.limits.slot(caller_key(scope)):
            await self.app(scope, receive, send)
