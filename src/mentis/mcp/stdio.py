"""MCP over stdio, for the Mentis server (:mod:`mentis.mcp.server`) and the remote proxy
(:mod:`mentis.mcp.remote`) alike: stdout carries only JSON-RPC, and a line that is not a message is
answered with a parse error instead of being dropped."""

from __future__ import annotations

import json
from typing import Any

import anyio
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError


def _unparseable_reply(exc: Exception) -> SessionMessage:
    """A JSON-RPC parse error (-32700) for a line the SDK could not read as a message.

    The id is recovered when the line is JSON that only the SDK's strict parser refuses (e.g. a
    lone surrogate escape), so the client waiting on that request gets its answer.
    """
    request_id: str | int | None = None
    if isinstance(exc, ValidationError):
        for err in exc.errors(include_url=False):
            raw = err.get("input")
            if isinstance(raw, str | bytes):
                try:
                    parsed = json.loads(raw)
                except ValueError:
                    break
                candidate = parsed.get("id") if isinstance(parsed, dict) else None
                if isinstance(candidate, str | int) and not isinstance(candidate, bool):
                    request_id = candidate
                break
    text = "Parse error: the line is not a JSON-RPC message (invalid JSON, or text with a lone surrogate)"
    error = JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=PARSE_ERROR, message=text))
    return SessionMessage(error)


async def run_stdio(server: MCPServer[Any] | Server[Any]) -> None:
    """Serve MCP over stdio, answering unparseable lines instead of dropping them.

    mcp 2.3.0's stdio transport hands such a line on as an exception, which the dispatcher only
    logs, so the client would wait forever; here each gets a -32700 reply.
    """
    # The one use of a private SDK name. mcp 2.3.0 has no public way to run an MCPServer on
    # streams of our own: run_stdio_async() opens stdio itself, its low-level Server is reachable
    # only as `_lowlevel_server`, and the dispatcher's on_stream_exception hook is not exposed on
    # the server side (server middleware sees messages, never a stream exception).
    lowlevel = server._lowlevel_server if isinstance(server, MCPServer) else server
    async with stdio_server() as (read_stream, write_stream):
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)

        async def pump() -> None:
            async with send:
                async for item in read_stream:
                    if isinstance(item, Exception):
                        await write_stream.send(_unparseable_reply(item))
                    else:
                        await send.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            await lowlevel.run(receive, write_stream, lowlevel.create_initialization_options())
            tg.cancel_scope.cancel()
