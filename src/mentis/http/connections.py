"""Connection limits uvicorn does not set: a deadline for each request, a cap on open connections,
and the process's file-descriptor limit.

uvicorn (0.55, h11) closes a connection by itself only when it sits idle *after* a response
(``timeout_keep_alive``); a client that connects and never finishes its request head is held
forever, each one an open file descriptor, so about a thousand idle sockets exhausted the
process's descriptors (EMFILE) and ``/health`` went unanswered. Its ``limit_concurrency`` does not
help: it answers 503 only once a request head has arrived, and counts the idle connections too.

:func:`guarded_h11` is uvicorn's own h11 protocol with a :class:`ConnectionGuard` that:

- gives each phase of a request a deadline from the moment it begins: the head
  ``head_timeout_s`` once the connection is ready for one (accepted, or its previous response
  sent), the body ``body_timeout_s`` from the head, and the answer (made and read by the client)
  both together; deadlines are absolute, so bytes trickled one at a time do not extend them, and
  past one the connection is dropped at once (with what is still unsent: a client that does not
  read cannot hold a socket either);
- keeps at most ``max_connections`` open: a new connection beyond the cap drops the connection
  that has waited longest for its request head (else the one that has been sending its body
  longest), so a flood of idle or slow sockets cannot lock out ``/health`` or a real request;
  only when every open connection has a whole request being answered is the new one refused
  (``503``, ``Connection: close``).

:func:`raise_fd_limit` raises the soft ``RLIMIT_NOFILE`` to the hard one at start, and
:func:`connection_cap` keeps the cap below it with room for the store's files and for the sockets
accepted before the guard has made room: asyncio accepts up to :data:`ACCEPT_BATCH` sockets
each time the listening socket is ready (:class:`GuardedServer` sets the kernel's queue back to
:data:`LISTEN_BACKLOG`, so a flood waits there rather than being dropped), a new socket reaches
the guard two loop turns later and the connection it evicts is closed one turn after that, so
three batches can be open above the cap for a moment (:data:`IN_FLIGHT`).

Not covered: with ``--tls-cert``, asyncio finishes the TLS handshake before the protocol sees
the connection, so a socket that never completes one is held up to asyncio's 60 s handshake
timeout, uncounted; serve through a TLS-terminating proxy where that matters.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import h11
import uvicorn
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from mentis.errors import ConfigError

log = logging.getLogger(__name__)

ACCEPT_BATCH = 64
"""The most sockets asyncio accepts in one go (it takes uvicorn's ``backlog`` for that)."""
LISTEN_BACKLOG = 2048
"""The kernel's queue of connections not yet accepted (set again once asyncio has set its own)."""
IN_FLIGHT = 3 * ACCEPT_BATCH
"""Sockets that can be open above the cap before the evicted ones are closed."""
RESERVED_FDS = 128
"""File descriptors kept for everything but client connections (store files, WAL, model, pool)."""
MIN_CONNECTIONS = 16
WARN_EVERY_S = 10.0

_REFUSAL_BODY = (
    b'{"error":{"code":"too_many_connections","message":"every connection is busy; retry in 1 s"}}'
)
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(_REFUSAL_BODY), _REFUSAL_BODY)
)
"""What a connection beyond the cap gets when no open connection can make room for it."""


UNLIMITED = 1 << 20
"""What an unlimited (or unknown, off POSIX) open-files limit counts as."""


def fd_limit() -> int:
    """The soft limit of open files in force."""
    try:
        import resource
    except ImportError:  # not POSIX
        return UNLIMITED
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return UNLIMITED if soft == resource.RLIM_INFINITY else soft


def raise_fd_limit() -> int:
    """Raise the soft limit of open files to the hard one where the platform allows (else leave
    it and log why); the soft limit in force afterwards."""
    try:
        import resource
    except ImportError:  # not POSIX: nothing to raise
        return UNLIMITED
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = UNLIMITED if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return fd_limit()
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:  # e.g. macOS refuses more than kern.maxfilesperproc
        log.warning("could not raise the open-files limit from %d to %d: %s", soft, target, exc)
    return fd_limit()


def connection_cap(requested: int, fd_limit: int) -> int:
    """``requested`` connections, lowered to fit under ``fd_limit`` open files."""
    room = fd_limit - RESERVED_FDS - IN_FLIGHT
    if room < MIN_CONNECTIONS:
        raise ConfigError(
            f"the open-files limit ({fd_limit}) leaves room for {max(room, 0)} connections; "
            f"raise it (`ulimit -n {RESERVED_FDS + IN_FLIGHT + requested}`) and start again"
        )
    return min(requested, room)


class Connection(Protocol):
    """What the guard needs of a connection: a way to drop it at once."""

    def abort(self) -> None: ...


Phase = Literal["head", "body", "answer"]


@dataclass
class ConnectionGuard:
    """The limits, and the connections open under them (one event loop; no locks needed).

    A connection is in one phase at a time, each with its deadline from when it began: ``head``
    (waiting for a request head: ``head_timeout_s``), ``body`` (receiving the body:
    ``body_timeout_s``) or ``answer`` (the request is in; the response is being made and read:
    ``body_timeout_s + head_timeout_s``, so a client that does not read cannot hold a socket).
    """

    max_connections: int
    head_timeout_s: float
    body_timeout_s: float
    open: set[Connection] = field(default_factory=set)
    waiting: dict[Connection, None] = field(default_factory=dict)
    """Connections waiting for a request head, longest-waiting first."""
    receiving: dict[Connection, None] = field(default_factory=dict)
    """Connections sending a request body, longest-sending first."""
    active_at: float = field(default_factory=time.monotonic)
    """When a connection last opened or closed (:class:`GuardedServer`'s idle clock)."""
    _warned_at: float = -WARN_EVERY_S

    def timeout(self, phase: Phase) -> float:
        if phase == "head":
            return self.head_timeout_s
        if phase == "body":
            return self.body_timeout_s
        return self.body_timeout_s + self.head_timeout_s

    def admit(self, connection: Connection) -> bool:
        """Make room for ``connection`` and count it: True when there is room (maybe by dropping
        the connection that has waited longest for its head, else sent its body longest), False
        when every open connection has a whole request being answered."""
        if len(self.open) >= self.max_connections:
            victim = next(iter(self.waiting), None) or next(iter(self.receiving), None)
            if victim is None:
                now = time.monotonic()
                if now - self._warned_at >= WARN_EVERY_S:
                    self._warned_at = now
                    log.warning("%d connections are busy with requests; refusing new ones", len(self.open))
                return False
            self.drop(victim)
            victim.abort()
        self.open.add(connection)
        self.active_at = time.monotonic()
        return True

    def enter(self, connection: Connection, phase: Phase) -> None:
        """``connection`` begins ``phase`` (it goes to the back of its queue)."""
        self.waiting.pop(connection, None)
        self.receiving.pop(connection, None)
        if phase == "head":
            self.waiting[connection] = None
        elif phase == "body":
            self.receiving[connection] = None

    def drop(self, connection: Connection) -> None:
        self.active_at = time.monotonic()
        self.open.discard(connection)
        self.waiting.pop(connection, None)
        self.receiving.pop(connection, None)


def guarded_h11(guard: ConnectionGuard) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol under ``guard`` (pass it as ``uvicorn.Config(http=...)``)."""

    class GuardedH11Protocol(H11Protocol):
        def __init__(
            self,
            config: Config,
            server_state: ServerState,
            app_state: dict[str, Any],
            _loop: asyncio.AbstractEventLoop | None = None,
        ) -> None:
            super().__init__(config, server_state, app_state, _loop)
            self._phase: Phase | None = None
            self._deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if not guard.admit(self):
                transport.write(REFUSAL)
                transport.close()
                return
            self._track()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._track()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._track()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel()
            guard.drop(self)
            super().connection_lost(exc)

        def abort(self) -> None:
            """Close at once, dropping what is still unsent (a client that does not read)."""
            self._cancel()
            guard.drop(self)
            self.transport.abort()

        def _track(self) -> None:
            """Start the deadline of the phase the request is in, when it changed."""
            if self.transport.is_closing():
                return  # the deadline already running still ends it if the close stalls
            state = self.conn.their_state
            phase: Phase = "head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else "answer"
            if phase == self._phase:
                return
            self._cancel()
            self._phase = phase
            guard.enter(self, phase)
            self._deadline = self.loop.call_later(guard.timeout(phase), self._expire)

        def _cancel(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            log.debug("dropping %s: past the %s deadline", self.client, self._phase)
            self._deadline = None
            self.abort()

    return GuardedH11Protocol


class GuardedServer(uvicorn.Server):
    """uvicorn's server, with the kernel's listen queue set back to :data:`LISTEN_BACKLOG` after
    asyncio set it to its accept batch (``Config(backlog=ACCEPT_BATCH)``), and with
    ``idle_exit_s``, an exit once ``guard`` has had no connection open for that long."""

    def __init__(self, config: Config, guard: ConnectionGuard, idle_exit_s: float | None = None) -> None:
        super().__init__(config)
        self.guard = guard
        self.idle_exit_s = idle_exit_s

    async def on_tick(self, counter: int) -> bool:
        if await super().on_tick(counter):
            return True
        if self.idle_exit_s is None or self.guard.open:
            return False
        if time.monotonic() - self.guard.active_at < self.idle_exit_s:
            return False
        log.warning("no connection for %g s: exiting", self.idle_exit_s)
        return True

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.guard.active_at = time.monotonic()  # the idle clock starts when serving does
        for sock in sockets or ():  # mentis passes its own listening sockets (http.app.listen)
            sock.listen(LISTEN_BACKLOG)
