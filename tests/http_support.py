"""A real Mentis HTTP server on a free loopback port, run by uvicorn in a background thread.

The socket is bound and listening before the thread starts, so a client may connect at once (the
kernel queues it until uvicorn accepts): nothing polls or sleeps waiting for the server.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mentis.config import Settings
from mentis.http import HttpConfig, build_app, listen, server
from mentis.providers.embed import Embedder, HashEmbedder
from mentis.service.memory import Memory
from mentis.service.profiles import parse_profile
from mentis.service.tokens import TokenStore


class LiveServer:
    def __init__(
        self,
        db_path: Path,
        *,
        embedder: Embedder | None = None,
        settings: Settings | None = None,
        tools: str = "all",
        **config: Any,
    ) -> None:
        """A server on the SQLite file ``db_path``, or on the store of ``settings`` (PostgreSQL too),
        offering the MCP tool profile ``tools`` (every tool unless a test asks for less)."""
        self.db_path = db_path
        self.embedder = embedder or HashEmbedder()
        self.config = HttpConfig(host="127.0.0.1", port=0, **config)
        settings = settings or Settings(home=db_path.parent, db_path=db_path)
        self.tokens = TokenStore.open(settings)
        self.memory = Memory.open(settings, self.embedder)
        self._sock = listen(self.config)
        self.port = int(self._sock.getsockname()[1])
        app = build_app(
            self.memory, self.tokens if self.config.auth else None, self.config, profile=parse_profile(tools)
        )
        self.server = server(app, dataclasses.replace(self.config, port=self.port))
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"{self.config.scheme}://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=15)
        assert not self._thread.is_alive(), "the server thread did not stop"
        self._sock.close()
        self.memory.close()
        self.tokens.close()

    def token(
        self,
        scope: str = "write",
        repos: tuple[str, ...] = ("*",),
        agent: str | None = None,
        expires_at: datetime | None = None,
    ) -> str:
        token, _ = self.tokens.create(scope=scope, repositories=repos, agent=agent, expires_at=expires_at)
        return token

    def client(self, token: str | None = None, **kwargs: Any) -> httpx2.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx2.AsyncClient(base_url=self.url, headers=headers, timeout=30, **kwargs)

    def ledger(self) -> list[str]:
        """Every entry hash, in order: equal before and after means nothing was written."""
        return [e.hash for e, _ in self.memory.store.iter_ledger()]


@asynccontextmanager
async def mcp_client(live: LiveServer, token: str | None) -> AsyncIterator[Client]:
    """The official MCP client over real streamable HTTP, sending ``token`` as a bearer token."""
    async with (
        live.client(token) as http,
        Client(streamable_http_client(f"{live.url}/mcp", http_client=http)) as client,
    ):
        yield client
