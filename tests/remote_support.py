"""Real processes for the remote proxy's tests: `mentis serve --remote` children driven by the
official MCP client over their stdio, in front of a `mentis serve --http` child on a loopback port
(:func:`http_server`, for the tests that stop, pause or restart it, or pass it TLS options) or of the
same app served in this process (:func:`live_server`, a second or more quicker per test)."""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from mentis.config import Settings
from mentis.ledger import signing
from mentis.providers.embed import HashEmbedder
from mentis.service.agent_keys import create_agent_key
from mentis.service.memory import Caller, Memory
from mentis.service.tokens import TokenStore
from tests.http_support import LiveServer

MENTIS = [sys.executable, "-m", "mentis"]


def make_token(db_path: Path, agent: str, scope: str = "write") -> str:
    """A token in the server's store (made before the server starts, as `mentis token create` does)."""
    tokens = TokenStore(db_path)
    try:
        token, _ = tokens.create(scope=scope, repositories=("*",), agent=agent)
    finally:
        tokens.close()
    return token


def keygen(env: dict[str, str], agent: str, path: Path) -> Ed25519PrivateKey:
    """``agent`` registered with a new Ed25519 key on the store of ``env`` by `mentis agent keygen`,
    its private key written to ``path``."""
    done = subprocess.run(
        [*MENTIS, "agent", "keygen", "--agent", agent, "--out", str(path), "--json"],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return signing.load_private_key(path)


def keygen_here(db_path: Path, agent: str, path: Path) -> Ed25519PrivateKey:
    """:func:`keygen` in this process: the service call `mentis agent keygen` makes, by the local
    (admin) caller the CLI would be. The command itself runs in tests/test_signing_stdio.py."""
    memory = Memory.open(Settings(home=db_path.parent, db_path=db_path, embedder="hash"), HashEmbedder())
    try:
        create_agent_key(memory, Caller(agent_id="test-agent", admin=True), agent, path)
    finally:
        memory.close()
    return signing.load_private_key(path)


@asynccontextmanager
async def live_server(db_path: Path) -> AsyncIterator[str]:
    """The app `mentis serve --http 127.0.0.1:0 --tools all` serves (token auth, every tool) on the
    SQLite file ``db_path``, run in this process (tests/http_support.py); yields its MCP URL."""
    with LiveServer(db_path, tools="all") as live:
        yield f"{live.url}/mcp"


@asynccontextmanager
async def http_server(env: dict[str, str], bind: str = "127.0.0.1:0", *extra: str) -> AsyncIterator[str]:
    """`mentis serve --http BIND` on the test's store; yields its MCP URL once the banner is out.
    Stopped (terminated and waited for) on exit."""
    async with http_server_process(env, bind, *extra) as (url, _):
        yield url


@asynccontextmanager
async def http_server_process(
    env: dict[str, str], bind: str = "127.0.0.1:0", *extra: str
) -> AsyncIterator[tuple[str, anyio.abc.Process]]:
    """:func:`http_server`, yielding the child process too."""
    process = await anyio.open_process([*MENTIS, "serve", "--http", bind, "--tools", "all", *extra], env=env)
    try:
        url = await _banner_url(process)
        yield f"{url}/mcp", process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGCONT)  # in case a test paused it
        if process.returncode is None:
            process.terminate()
        with anyio.fail_after(30):
            await process.wait()
        await process.aclose()


async def _banner_url(process: anyio.abc.Process) -> str:
    assert process.stderr is not None
    text = b""
    while b"harness config:" not in text:
        try:
            text += await process.stderr.receive()
        except anyio.EndOfStream:
            raise AssertionError(f"the server exited: {text.decode()}") from None
    found = re.search(r"serving HTTP on (\S+) ", text.decode())
    assert found, text
    return found.group(1)


def proxy_params(url: str, env: dict[str, str], *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "mentis", "serve", "--remote", url, "--tools", "all", *extra],
        env=env,
    )


@asynccontextmanager
async def direct_client(url: str, token: str) -> AsyncIterator[Client]:
    """The official client straight to the HTTP server: what the proxy must reproduce."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text if result.content else result
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    return str(result.content[0].text)


def ledger_rows(db_path: Path) -> list[tuple[Any, ...]]:
    """Every entry (chain, seq, kind, id, at, agent, body_hash, key_id, sig), read straight from the
    server's SQLite file, outside Mentis."""
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return con.execute(
            "SELECT chain, seq, kind, id, at, agent, body_hash, key_id, sig FROM entries ORDER BY rowid"
        ).fetchall()
    finally:
        con.close()
