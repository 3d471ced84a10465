"""Pure ASGI middleware: host checks, authentication, rate limits, timeouts and body limits.

Order (outermost first): :class:`HostGuard` → :class:`Authenticate` → :class:`RateLimit` →
:class:`Timeout` → :class:`BodyLimit` → the routes. They only check and attach; authorisation (what
a caller may read or write) happens in ``memory.py``, from the :class:`~mentis.memory.Caller`
that :class:`Authenticate` puts under ``scope["mentis.caller"]``.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mentis.auth import CALLER_SCOPE_KEY, TokenStore
from mentis.http.rest import error_response
from mentis.memory import Caller

TOKEN_ID_KEY = "mentis.token_id"
PUBLIC_PATHS = frozenset({"/health"})
DASHBOARD = "/dashboard"
"""Signs people in with a session cookie itself (:mod:`mentis.dashboard`), so no bearer token here."""


STATIC = DASHBOARD + "/static/"


def _dashboard(path: str) -> bool:
    return path == DASHBOARD or path.startswith(DASHBOARD + "/")


def host_name(host: str) -> str:
    """``example.org:443`` → ``example.org``; ``[::1]:9471`` → ``::1``; lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class HostGuard:
    """DNS-rebinding protection: the Host header must name an allowed host (else 421) and an
    Origin header, when present, must be an http(s) origin on an allowed host (else 403)."""

    def __init__(self, app: ASGIApp, allowed: Collection[str]) -> None:
        self.app = app
        self.allowed = frozenset(host_name(h) for h in allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = host_name(headers.get("host", ""))
        if host not in self.allowed:
            response = error_response(
                421, "misdirected", f"Host {headers.get('host', '')!r} is not served here; allowed hosts: "
                f"{', '.join(sorted(self.allowed))} (add one with --allow-host)",
            )  # fmt: skip
            await response(scope, receive, send)
            return
        origin = headers.get("origin")
        if origin is not None:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or (parts.hostname or "") not in self.allowed:
                response = error_response(403, "forbidden_origin", f"Origin {origin!r} is not allowed")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS or _dashboard(scope["path"]):
            await self.app(scope, receive, send)
            return
        if self.tokens is None:
            scope[CALLER_SCOPE_KEY] = self.anonymous
            await self.app(scope, receive, send)
            return
        scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            await self._refuse(
                scope, receive, send, "send Authorization: Bearer <token> (`mentis token create`)"
            )
            return
        info = await anyio.to_thread.run_sync(self.tokens.lookup, token)
        problem = "the token is not valid" if info is None else None
        if info is not None and info.status() != "active":
            problem = f"the token {info.id} is {info.status()}; create a new one with `mentis token create`"
        if problem is not None or info is None:
            await self._refuse(scope, receive, send, problem or "", invalid=True)
            return
        scope[CALLER_SCOPE_KEY] = info.caller()
        scope[TOKEN_ID_KEY] = info.id
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(
        scope: Scope, receive: Receive, send: Send, message: str, invalid: bool = False
    ) -> None:
        challenge = 'Bearer realm="mentis"' + (', error="invalid_token"' if invalid else "")
        response = error_response(401, "unauthorized", message, headers={"WWW-Authenticate": challenge})
        await response(scope, receive, send)


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


class RateLimit:
    """Per-token rate limit: 429 with Retry-After when a token's bucket is empty."""

    def __init__(self, app: ASGIApp, bucket: TokenBucket) -> None:
        self.app = app
        self.bucket = bucket

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS or scope["path"].startswith(STATIC):
            await self.app(scope, receive, send)
            return
        key = str(scope.get(TOKEN_ID_KEY, "anonymous"))
        if _dashboard(scope["path"]):  # signed in by cookie inside the dashboard: one bucket per client
            key = f"dashboard:{(scope.get('client') or ('?', 0))[0]}"
        wait = self.bucket.take(key)
        if wait > 0:
            retry = max(1, math.ceil(wait))
            response = error_response(
                429, "rate_limited", f"too many requests for this token; retry in {retry} s",
                headers={"Retry-After": str(retry)},
            )  # fmt: skip
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
