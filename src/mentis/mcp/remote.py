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

from mentis.errors import ConfigError, MentisError
from mentis.ledger.signing import load_private_key
from mentis.mcp.remote_link import Forward, Link, Remote, RemoteConfig, leaves
from mentis.mcp.remote_signing import RemoteSigner
from mentis.mcp.stdio import run_stdio
from mentis.service.profiles import Profile, parse_profile
from mentis.service.signed_writes import PHASES
from mentis.version import __version__


def error_result(tool: str, exc: MentisError) -> CallToolResult:
    """A tool error in the form the Mentis server gives its own."""
    text = f"Error executing tool {tool}: [{exc.code}] {exc}"
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


def _check_phases(remote: Remote, url: str) -> None:
    """A signing proxy needs the remote's two signing phases; without them it cannot write."""
    missing = sorted(PHASES - {t.name for t in remote.tools})
    if missing:
        raise ConfigError(
            f"the remote Mentis at {url} does not offer {' and '.join(missing)}, which signing writes "
            "needs: start it with the signing profile too (`mentis serve --http --tools default,signing`)"
        )


def offered(remote: Remote, profile: Profile) -> Remote:
    """What the proxy publishes of the remote's tools: those ``profile`` offers."""
    return Remote([t for t in remote.tools if profile.offers(t.name)], remote.instructions)


def build_proxy(remote: Remote, forward: Forward) -> Server[Any]:
    """The stdio-side server: the remote's tools, each call handed to ``forward``; a call to any
    other tool is an unknown tool, as the Mentis server answers one."""
    published = {tool.name for tool in remote.tools}

    async def list_tools(_: ServerRequestContext[Any], __: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=remote.tools)

    async def call_tool(_: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
        if params.name not in published:
            return CallToolResult(
                content=[TextContent(type="text", text=f"Unknown tool: {params.name}")], is_error=True
            )
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
    profile: Profile | None = None,
) -> None:
    """Connect, then serve MCP on stdio until stdin closes; RemoteUnavailable when the first
    connection fails (bad URL, server down, token refused). The remote's tools are published as far
    as ``profile`` (default: ``default``) offers them; the signing phases the proxy runs itself."""
    key = None if signing_key is None else load_private_key(signing_key)
    link = Link(config)
    try:
        async with anyio.create_task_group() as tg:
            published: Remote = await tg.start(link.run)
            if key is not None:
                _check_phases(published, config.url)
            remote = offered(published, profile or parse_profile(None))
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
