"""``mentis serve --remote URL``: a stdio MCP server that forwards every tool to a remote Mentis.

A harness that only launches stdio servers reaches a team's ``mentis serve --http`` through it. The
proxy publishes exactly the tools the remote published when it connected and hands each call to
the HTTP side (:mod:`mentis.mcp.remote_link`), which returns the remote result, or tool error,
unchanged. With ``MENTIS_SIGNING_KEY`` set, writes are signed on the way
(:mod:`mentis.mcp.remote_signing`), and which tools write is the proxy's own table's to say
(:mod:`mentis.mcp.remote_writes`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from mcp.server import Server, ServerRequestContext
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
)

from mentis.errors import MentisError
from mentis.ledger.signing import load_private_key
from mentis.mcp.remote_link import Forward, Link, Remote, RemoteConfig, leaves
from mentis.mcp.remote_signing import RemoteSigner
from mentis.mcp.stdio import run_stdio
from mentis.version import __version__


def error_result(tool: str, exc: MentisError) -> CallToolResult:
    """A tool error in the form the Mentis server gives its own."""
    text = f"Error executing tool {tool}: [{exc.code}] {exc}"
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def build_proxy(remote: Remote, forward: Forward) -> Server[Any]:
    """The stdio-side server: the remote's tools, each call handed to ``forward``."""

    async def list_tools(_: ServerRequestContext[Any], __: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=remote.tools)

    async def call_tool(_: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        try:
            return await forward(params.name, dict(params.arguments or {}))
        except MentisError as exc:
            return error_result(params.name, exc)

    return Server(
        "mentis",
        version=__version__,
        instructions=remote.instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve(
    config: RemoteConfig,
    *,
    signing_key: Path | None = None,
    agent_id: str | None = None,
    ready: Callable[[Remote], None] = lambda _: None,
) -> None:
    """Connect, then serve MCP on stdio until stdin closes; RemoteUnavailable when the first
    connection fails (bad URL, server down, token refused)."""
    key = None if signing_key is None else load_private_key(signing_key)
    link = Link(config)
    try:
        async with anyio.create_task_group() as tg:
            remote: Remote = await tg.start(link.run)
            forward: Forward = link.call
            if key is not None:
                signer = RemoteSigner(link, key, agent_id)
                remote = Remote(signer.tools(remote.tools), remote.instructions)
                forward = signer.forwarder()
            ready(remote)
            try:
                await run_stdio(build_proxy(remote, forward))
            finally:
                link.close()
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # the task group wraps what failed in it
        ours = [e for e in leaves(group) if isinstance(e, MentisError)]
        if ours:
            raise ours[0] from None
        raise
