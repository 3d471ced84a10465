"""The proxy's HTTP side (``mentis serve --remote URL``): one MCP session with the remote Mentis.

At start the :class:`Link` opens one session with the remote server over streamable HTTP (the
official client, with the bearer token) and lists its tools once; every call is forwarded on that
session and the remote result, or tool error, is returned unchanged. When the connection fails, the
calls that were on it fail with a clear error (their outcome is unknown) and the next call opens a
new session; every wait is bounded, so a server that is down or hangs gives an error, never a hang,
and every answer is read with a byte bound (:mod:`mentis.mcp.remote_http`), so one that answers
without end gives an error too.

The SDK's client must be entered and left in one task, and a transport failure tears down its
task group, so one task (:meth:`Link.run`) owns the session and runs each call inside it; callers
hand it :class:`_Call` jobs and wait for their answer.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
from anyio.abc import TaskStatus
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INTERNAL_ERROR,
    REQUEST_TIMEOUT,
    CallToolResult,
    Implementation,
    Tool,
)

from mentis.errors import ConfigError, MentisError, RemoteUnavailable, ResponseTooLarge
from mentis.mcp.remote_http import MAX_RESPONSE_MB, TOO_LARGE, CappedTransport, MiB, env_proxy
from mentis.providers.http import loopback_host
from mentis.version import __version__

log = logging.getLogger(__name__)

TOKEN_ENV = "MENTIS_TOKEN"
CONNECT_TIMEOUT_S = 10.0
"""Opening a connection (TCP + TLS) to the remote server."""
CALL_TIMEOUT_S = 120.0
"""One remote call, from sending it to its answer (a search may embed, a write may wait on a lock)."""


@dataclass(frozen=True)
class RemoteConfig:
    url: str
    token: str = field(repr=False)
    ca_file: Path | None = None
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    call_timeout_s: float = CALL_TIMEOUT_S
    max_response_bytes: int = MAX_RESPONSE_MB * MiB


def check_url(url: str) -> str:
    """The MCP endpoint URL: https, or http only to a loopback address (a token must not cross a
    network in clear text)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"--remote must be an http(s) URL such as https://mentis.example.com/mcp, not {url!r}"
        )
    if parts.username or parts.password:
        raise ConfigError(
            "--remote must not carry credentials; the token comes from --token-file or MENTIS_TOKEN"
        )
    if parts.scheme == "http" and not loopback_host(parts.hostname):
        raise ConfigError(
            f"--remote {url}: plain http would send the token in clear text; use https "
            "(the server's --tls-cert/--tls-key, and --ca-file here for a private CA)"
        )
    return url


def read_token(token_file: Path | None, environ: dict[str, str] | None = None) -> str:
    """The bearer token: the first line of ``token_file``, else ``MENTIS_TOKEN``."""
    env = os.environ if environ is None else environ
    if token_file is None:
        token = env.get(TOKEN_ENV, "").strip()
        if not token:
            raise ConfigError(
                f"--remote needs a token: --token-file FILE, or {TOKEN_ENV} in the environment "
                "(`mentis token create --agent NAME --scope write` on the server makes one)"
            )
        return token
    try:
        lines = token_file.expanduser().read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot read the token file {token_file}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    token = lines[0].strip() if lines else ""
    if not token:
        raise ConfigError(f"the token file {token_file} is empty")
    return token


def _ssl_context(ca_file: Path | None) -> ssl.SSLContext | bool:
    if ca_file is None:
        return True
    try:
        return ssl.create_default_context(cafile=str(ca_file.expanduser()))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the CA certificates in {ca_file}: {exc}") from None


def leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def _tls_cause(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error under ``exc`` (httpx wraps it in a ConnectError), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


@dataclass(eq=False)
class _Call:
    """One forwarded call: the Link's task fills in ``result`` or ``error`` and sets ``done``."""

    name: str
    arguments: dict[str, Any]
    done: anyio.Event = field(default_factory=anyio.Event)
    result: CallToolResult | None = None
    error: MentisError | None = None

    def fail(self, error: MentisError) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


@dataclass
class Remote:
    """What the remote server published when the proxy connected."""

    tools: list[Tool]
    instructions: str | None


class Link:
    """One MCP session with the remote server, owned by the task running :meth:`run`."""

    def __init__(self, config: RemoteConfig) -> None:
        self.config = config
        self._send, self._receive = anyio.create_memory_object_stream[_Call](256)
        self._refused: int | None = None
        self._inflight: set[_Call] = set()
        self._verify = _ssl_context(config.ca_file)

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[Client]:
        async def on_response(response: httpx2.Response) -> None:
            if response.status_code >= 400:  # kept (not reset by a success): concurrent calls race
                self._refused = response.status_code

        timeout = httpx2.Timeout(self.config.call_timeout_s, connect=self.config.connect_timeout_s)
        limit = self.config.max_response_bytes
        network = httpx2.AsyncHTTPTransport(verify=self._verify, proxy=env_proxy(self.config.url))
        async with (
            httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {self.config.token}", "Accept-Encoding": "identity"},
                timeout=timeout,
                transport=CappedTransport(network, limit),
                event_hooks={"response": [on_response]},
            ) as http,
            Client(
                streamable_http_client(self.config.url, http_client=http, max_sse_event_size=limit),
                read_timeout_seconds=self.config.call_timeout_s,
                client_info=Implementation(name="mentis-remote-proxy", version=__version__),
            ) as client,
        ):
            yield client

    def describe(self, exc: BaseException) -> str:
        """What went wrong with the connection, for a person: the cause and what to do."""
        where = f"the remote Mentis at {self.config.url}"
        if self._refused == 401:
            return (
                f"{where} refused the token (HTTP 401); check --token-file / {TOKEN_ENV} "
                "(`mentis token list` on the server)"
            )
        if self._refused == 403:
            return (
                f"{where} refused the request (HTTP 403): the token does not allow it, "
                "or the server does not allow this host name (its --allow-host)"
            )
        if self._refused == 429:
            return (
                f"{where} refused the request (HTTP 429: too many requests for this token); try again shortly"
            )
        if self._refused is not None:
            return f"{where} answered HTTP {self._refused}; see the server's log"
        causes = []
        for leaf in leaves(exc):
            tls = _tls_cause(leaf)
            if tls is not None:
                causes.append(f"TLS failed ({tls.reason or tls}); for a private CA pass --ca-file")
            elif isinstance(leaf, httpx2.ConnectError | httpx2.ConnectTimeout):
                causes.append(f"cannot connect ({leaf or type(leaf).__name__})")
            elif isinstance(leaf, httpx2.TimeoutException):
                causes.append("no answer in time")
            elif isinstance(leaf, MCPError):
                causes.append(f"MCP error {leaf.code}: {leaf.error.message}")
            else:
                causes.append(f"{type(leaf).__name__}: {leaf}")
        return f"{where} is unavailable: {'; '.join(dict.fromkeys(causes)) or 'connection closed'}"

    async def run(self, *, task_status: TaskStatus[Remote] = anyio.TASK_STATUS_IGNORED) -> None:
        """Connect and list the remote's tools (given to ``task_status``; a failure here raises
        RemoteUnavailable), then run calls until :meth:`close`, reconnecting after a failure
        when the next call arrives."""
        remote: Remote | None = None
        waiting: _Call | None = None
        while True:
            self._refused = None
            try:
                async with self._open() as client:
                    if remote is None:
                        remote = Remote(await _list_tools(client), client.instructions)
                        task_status.started(remote)
                    async with anyio.create_task_group() as tg:
                        if waiting is not None:
                            tg.start_soon(self._forward, client, waiting)
                            waiting = None
                        async for job in self._receive:
                            tg.start_soon(self._forward, client, job)
                self._fail_inflight("the proxy is closing")
                return
            except Exception as exc:
                reason = self.describe(exc)
                if remote is None:
                    raise RemoteUnavailable(reason) from None
                log.warning("%s", reason)
                self._fail_inflight(reason)
                if waiting is not None:
                    waiting.fail(RemoteUnavailable(f"{reason}; the call was not sent"))
                    waiting = None
            try:
                waiting = await self._receive.receive()
            except anyio.EndOfStream:
                return

    async def _forward(self, client: Client, job: _Call) -> None:
        self._inflight.add(job)
        try:
            result = await client.call_tool(job.name, job.arguments)
        except MCPError as exc:
            where = f"the remote Mentis at {self.config.url}"
            if exc.code == REQUEST_TIMEOUT:
                job.fail(
                    RemoteUnavailable(
                        f"{where} did not answer {job.name} within {self.config.call_timeout_s:g} s; its "
                        "outcome is unknown (search or recall before repeating a write)"
                    )
                )
            elif exc.code == TOO_LARGE:  # CappedTransport's answer in place of the server's
                job.fail(ResponseTooLarge(f"{where} answered {job.name}, but {exc.error.message}"))
            elif (
                exc.code == INTERNAL_ERROR and self._refused is not None
            ):  # the SDK's stand-in for an HTTP error
                job.fail(RemoteUnavailable(self.describe(exc)))
            else:
                job.fail(RemoteUnavailable(f"{where} answered with an error: {exc.error.message}"))
        except Exception as exc:  # this call's own failure (a result that does not match its schema…)
            job.fail(
                RemoteUnavailable(
                    f"the remote Mentis at {self.config.url}: {job.name} failed: {type(exc).__name__}: {exc}"
                )
            )
        else:
            job.result = result
            job.done.set()
        if job.done.is_set():  # else the connection failed under it: run() fails it with the cause
            self._inflight.discard(job)

    def _fail_inflight(self, reason: str) -> None:
        for job in self._inflight:
            job.fail(
                RemoteUnavailable(
                    f"{reason}; the call's outcome is unknown (search or recall before repeating a write)"
                )
            )
        self._inflight.clear()

    async def call(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        """The remote's result for one tool call (a tool error included); RemoteUnavailable when
        the server cannot be reached or does not answer within the call's bounds."""
        job = _Call(name, arguments)
        try:
            self._send.send_nowait(job)
        except (anyio.WouldBlock, anyio.ClosedResourceError):
            raise RemoteUnavailable(
                "the proxy has too many calls in flight or is closing; try again"
            ) from None
        with anyio.move_on_after(self.config.connect_timeout_s + self.config.call_timeout_s + 5):
            await job.done.wait()
        if not job.done.is_set():
            raise RemoteUnavailable(
                f"the remote Mentis at {self.config.url} did not answer {name} within "
                f"{self.config.call_timeout_s:g} s; its outcome is unknown"
            )
        if job.result is None:
            raise job.error or RemoteUnavailable("no answer")
        return job.result

    def close(self) -> None:
        self._send.close()


async def _list_tools(client: Client) -> list[Tool]:
    tools: list[Tool] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools


Forward = Callable[[str, dict[str, Any]], Awaitable[CallToolResult]]
"""What the stdio side hands each call to: :meth:`Link.call`, or the signer's forwarder."""
